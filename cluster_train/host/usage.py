"""The command-line parser of every `run-cluster` command: argparse's usage errors as our one-line UserError (argparse
would print the whole usage too, and exit with its own status)."""
import argparse

from cluster_train.shared.errors import UserError


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UserError(f"{message}; see {self.prog} --help")
