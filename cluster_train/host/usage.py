"""The command-line parser of every `run-cluster` command: argparse's usage errors as our one-line UserError (argparse
would print the whole usage too, and exit with its own status), and every argument refused where it holds bytes that
are not UTF-8 (cluster_train/host/undecodable.py), named by its option (`--set KEY` for a KEY=VALUE) or its place."""
import argparse
import re
from pathlib import Path

from cluster_train.shared.errors import UserError
from cluster_train.host import undecodable

REPR_ESCAPE = re.compile(r"\\udc([89a-f][0-9a-f])")  # a byte that is not UTF-8 in a repr() argparse quotes; \xff as typed


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        message = REPR_ESCAPE.sub(r"\\x\1", message)
        raise UserError(f"{message}; see {self.prog} --help")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        self.refuse_undecodable(parsed)
        return parsed, extras

    def refuse_undecodable(self, parsed: argparse.Namespace) -> None:
        """Each parsed value (tests/host/test_bad_inputs.py parses without it, to see the API refuse the same)."""
        for action in self._actions:
            refuse_value(named(action), getattr(parsed, action.dest, None))


def named(action: argparse.Action) -> str:
    """An argument as the user knows it: its long option, else its place's name (cluster, profile, experiment)."""
    return max(action.option_strings, key=len) if action.option_strings else action.dest


def refuse_value(name: str, value) -> None:
    """A parsed value: a string or path (a KEY=VALUE named by its key), or a list of them (a repeated option)."""
    if isinstance(value, (list, tuple)):
        for item in value:
            refuse_value(name, item)
    elif isinstance(value, (str, Path)):
        undecodable.refuse_setting(name, str(value))
