"""Read a user's YAML file (cluster, settings, experiment, sweep file, your own config) with one-line errors that name
the file and the line, and with bounds: a file larger than any hand-written config, nesting deeper than any, or
anchors that expand into more values than any (a "billion laughs" file) is refused instead of filling memory."""
from pathlib import Path
from typing import Any

import yaml

from cluster_train.shared.errors import UserError

MAX_BYTES = 1 << 20  # 1 MiB; the largest config shipped here is a few KB
MAX_DEPTH = 64  # nested mappings and lists
EVENT_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML was built with it
MAX_VALUES = 200_000  # values once anchors are expanded: a 5000-run sweep file holds about 20 000


def load_yaml(path, what: str) -> Any:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"{what} {path} cannot be read: {err.strerror}") from None
    if len(data) > MAX_BYTES:
        raise UserError(f"{what} {path} is {len(data) / 2**20:.1f} MiB; a YAML file read here may hold at most "
                        f"{MAX_BYTES >> 20} MiB: split it or keep data out of it")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{what} {path} is not UTF-8 text: {undecodable_line(data, err.start)}; save it as UTF-8") \
            from None
    return load_yaml_text(text, f"{what} {path}")


def undecodable_line(data: bytes, at: int) -> str:
    """The line that holds byte `at` (the first that is not UTF-8) as the user finds it in an editor: its number
    and its text, the key first, each such byte written as \\xNN."""
    start = data.rfind(b"\n", 0, at) + 1
    end = data.find(b"\n", at)
    line = data[start:end if end >= 0 else len(data)].strip().decode("utf-8", "backslashreplace")
    number = data.count(b"\n", 0, at) + 1
    return f"line {number} ({line[:80]})"


def load_yaml_text(text: str, shown: str) -> Any:
    """YAML text already read (`shown` names it in errors), parsed and checked against the bounds."""
    check_depth(text, shown)
    try:
        loaded = _parsed(text)
    except yaml.YAMLError as err:
        raise UserError(f"{shown} is not valid YAML: {_describe(err, text)}") from None
    except RecursionError:
        raise UserError(f"{shown} nests deeper than {MAX_DEPTH} levels; flatten it") from None
    check_bounds(loaded, shown)
    return loaded


def check_depth(text: str, shown: str) -> None:
    """Nesting deeper than MAX_DEPTH refused from the parser's events, before anything is built: PyYAML's pure-Python
    scanner takes time quadratic in unclosed brackets (20 000 `[` took seconds), libyaml's C parser stops at once. A
    syntax error is left to the full load, which names its line."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=EVENT_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    break
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as err:
        if "maximum nesting depth" not in str(err):  # libyaml's own bound (1000 levels)
            return
        depth = MAX_DEPTH + 1
    if depth > MAX_DEPTH:
        raise UserError(f"{shown} nests deeper than {MAX_DEPTH} levels; flatten it")


def check_bounds(tree: Any, shown: str) -> None:
    """Depth and expanded size, walked without recursion; stops at the first bound passed (an anchor used a million
    times is counted a million times, as everything that later walks the tree would). A text that is no UTF-8 (a
    "\\udce9" escape of half a character) is refused with its key, as it fails only where it is written out."""
    pending, seen = [(tree, 1, "")], 0
    while pending:
        node, depth, key = pending.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise UserError(f"{shown} expands to more than {MAX_VALUES} values (anchors and aliases count each use); "
                            f"write it out or make it smaller")
        if depth > MAX_DEPTH:
            raise UserError(f"{shown} nests deeper than {MAX_DEPTH} levels; flatten it")
        if isinstance(node, str):
            check_encodable(node, key, shown)
        elif isinstance(node, dict):
            pending.extend((child, depth + 1, f"{key}.{k}" if key else str(k)) for k, v in node.items()
                           for child in (k, v))
        elif isinstance(node, list):
            pending.extend((child, depth + 1, key) for child in node)


def check_encodable(text: str, key: str, shown: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        escaped = text.encode("utf-8", "backslashreplace").decode("utf-8")
        raise UserError(f"{shown}: {key or 'a value'} = '{escaped}' escapes half a character (a lone surrogate), "
                        f"which UTF-8 cannot hold; write the character itself") from None


def _parsed(text: str) -> Any:
    """libyaml's C loader where PyYAML has it (a cluster file in a few ms; the pure-Python one took 50 on a dry run);
    what it refuses is parsed again by PyYAML's own parser, which decides and words the error the same everywhere."""
    try:
        return yaml.load(text, Loader=EVENT_LOADER)
    except yaml.YAMLError:
        return yaml.safe_load(text)


def _describe(err: yaml.YAMLError, text: str) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is None:
        return problem
    line = text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else ""
    if "\t" in line[: mark.column + 1]:
        return f"line {mark.line + 1} is indented with a tab; indent YAML with spaces"
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
