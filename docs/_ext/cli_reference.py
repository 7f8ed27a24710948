"""The command-line reference (docs/reference/cli.md), written at every build from bin/run-cluster's own parsers: the
command table (cluster_train/host/commands.py) names every command, and each command's parser is the one it builds
when it runs, caught as it parses (so a new command or option is in the reference without anyone writing it)."""
import argparse
import os
from typing import Iterator, List, Tuple
from unittest import mock

from sphinx.errors import ExtensionError

from generated_page import generate

from cluster_train.host import commands
from cluster_train.host.submit import parser as submit_parser

MARKER = "<!-- generated: run-cluster commands -->"  # cli.md's placeholder for the generated sections
DOCNAME = "reference/cli"
WIDTH = "100"  # argparse wraps help to $COLUMNS: a fixed width, so the page does not depend on the builder's terminal


class _Parsing(Exception):
    """Raised in place of parsing: carries the parser the command built."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _caught(parser: argparse.ArgumentParser, *args, **kwargs):
    raise _Parsing(parser)


def parser_of(command: commands.Command) -> argparse.ArgumentParser:
    """The parser `run-cluster NAME` builds, caught before it parses anything (so the command does nothing)."""
    with mock.patch.object(argparse.ArgumentParser, "parse_args", _caught):
        try:
            commands.run(command, [command.name])
        except _Parsing as caught:
            return caught.parser
    raise ExtensionError(f"run-cluster {command.name} built no argparse parser: the CLI reference cannot show it")


def subcommands(parser: argparse.ArgumentParser) -> Iterator[Tuple[str, str, argparse.ArgumentParser]]:
    """(name, its line of help, parser) of each subcommand (`images push`, `data pack`, ...), in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            said = {choice.dest: choice.help or "" for choice in action._choices_actions}
            yield from ((name, said.get(name, ""), sub) for name, sub in action.choices.items())


def help_text(parser: argparse.ArgumentParser) -> str:
    with mock.patch.dict(os.environ, {"COLUMNS": WIDTH}):
        return parser.format_help().rstrip()


def section(title: str, summary: str, parser: argparse.ArgumentParser, level: str = "##") -> List[str]:
    return [f"{level} {title}", "", summary, "", "```text", help_text(parser), "```", ""]


def reference() -> str:
    """The Markdown of every command: the submission first, then the commands in the table's groups and order."""
    submit = submit_parser()
    submit.epilog = None  # the command listing: this page's sections
    lines = section("run-cluster CLUSTER PROFILE", commands.SUBMIT[1].split(" (")[0].capitalize() + ".", submit)
    for group in commands.GROUPS:
        for command in (c for c in commands.COMMANDS if c.group == group):
            parser = parser_of(command)
            lines += section(f"run-cluster {command.name}", f"{command.summary} ({group}).", parser)
            for name, summary, sub in subcommands(parser):
                lines += section(f"run-cluster {command.name} {name}", summary, sub, "###")
    return "\n".join(lines)


def setup(app):
    return generate(app, DOCNAME, lambda: {MARKER: reference()})
