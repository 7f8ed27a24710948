"""The one error type users see: a single line naming the bad value and the fix."""


class UserError(Exception):
    """Bad input. Printed as one line, exit status 2, nothing submitted or written."""
