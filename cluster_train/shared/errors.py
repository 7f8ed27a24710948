"""The one error type users see: a single line naming the bad value and the fix."""
from typing import Iterable, List


class UserError(Exception):
    """Bad input. Printed as one line, exit status 2, nothing submitted or written."""

    @property
    def lines(self) -> List[str]:
        return [str(self)]

    @property
    def problems(self) -> List[str]:
        """Each problem as the one line the command line prints for it (several where checks found several)."""
        return self.lines


class UserErrors(UserError):
    """Several independent problems found at once (preflight reports them all): one line each."""

    def __init__(self, errors: Iterable[UserError]):
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))

    @property
    def lines(self) -> List[str]:
        return [line for error in self.errors for line in error.lines]


def raise_all(errors: List[UserError]) -> None:
    """Raise the one error, or all of them together; nothing when the list is empty."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise UserErrors(errors)
