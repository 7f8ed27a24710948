"""Bytes that are not UTF-8 in a value the command line, the API or the environment hands over. Python keeps them in a
str as lone surrogates (PEP 383), which pass every check of a str and fail only where the text is written out as UTF-8
(a YAML parse, a job script, a manifest) with a traceback. They are refused where the values enter: the command line's
parser (cluster_train/host/usage.py), the job builder's Site and Request for the API, and `environ` here for the
environment; YAML files are refused when read (cluster_train/shared/yaml_file.py)."""
import os
from typing import Optional

from cluster_train.shared.errors import UserError

FIX = "give it as UTF-8 text (rename a file or directory whose name is not)"


def undecodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def shown(text: str) -> str:
    """The text with each undecodable byte written as \\xNN, as the user typed it (a lone surrogate that no byte
    made, from the API, as \\udNNN)."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def refuse(named: str, text: object) -> None:
    """One line naming the value (`--set data.root`, `$CT_RUNS_DIR`, `profile`) and the fix, if it holds such bytes."""
    if isinstance(text, str) and undecodable(text):
        raise UserError(f"{named}: '{shown(text)}' holds bytes that are not UTF-8; {FIX}")


def refuse_setting(named: str, line: str) -> None:
    """A KEY=VALUE line (--set, --sweep) named by its key where the key itself is UTF-8."""
    key, sep, value = line.partition("=")
    if sep and not undecodable(key):
        refuse(f"{named} {key}", value)
    refuse(named, line)


def environ(name: str) -> Optional[str]:
    """os.environ.get(name), refused where the variable holds such bytes."""
    value = os.environ.get(name)
    refuse(f"${name}", value)
    return value
