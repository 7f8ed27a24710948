"""Read a user's YAML file (cluster, settings, experiment) with one-line errors that name the file and the line."""
from pathlib import Path
from typing import Any

import yaml

from train.errors import UserError


def load_yaml(path, what: str) -> Any:
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    except OSError as err:
        raise UserError(f"{what} {path} cannot be read: {err.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise UserError(f"{what} {path} is not valid YAML: {_describe(err, text)}") from None


def _describe(err: yaml.YAMLError, text: str) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is None:
        return problem
    line = text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else ""
    if "\t" in line[: mark.column + 1]:
        return f"line {mark.line + 1} is indented with a tab; indent YAML with spaces"
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
