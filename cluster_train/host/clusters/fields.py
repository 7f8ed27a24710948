"""The typed-field readers of a cluster file: each takes a raw YAML value and `where` (the place it was read, for
the message) and returns the value checked, or raises UserError saying what is wrong and how to write it.

`record` builds a dataclass (a partition, a profile) from its mapping, every value checked against the field's type
hint and `min` metadata; the others read one kind of value (text, list of texts, flag, env, mapping, choice)."""
import dataclasses
import re
import typing
from typing import Any, Dict, List, Union

from cluster_train.shared.errors import UserError
from cluster_train.host.scheduling.facts import SAFE_NAME
from cluster_train.shared.registry import unknown_name

# A node feature expression (Slurm --constraint, LSF select[]): names and operators, nothing a directive cannot carry.
CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|()\[\]*!,:=<> -]+$")
# What neither a scheduler directive (#SBATCH --output=PATH, #BSUB -o PATH) nor a shell line carries as it is:
# blanks, quotes, shell characters, Slurm's %-patterns (%j), control characters.
UNCARRIED = re.compile(r"[\s\"'`$\\%;&|<>()*?\[\]{}!#]|[\x00-\x1f\x7f]")
# The pieces of an env value that mean something: $$, ${setting}, $NAME.
ENV_TEXT = re.compile(r"\$\$|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*")


def record(cls, name: str, spec: Any, where: str):
    """A partition or profile from its mapping, every value checked against the field's type and minimum."""
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be a mapping of keys, not a {kind(spec)}")
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    only_keys(spec, [n for n in by_name if n != "name"], where)
    hints = typing.get_type_hints(cls)
    values = {"name": name}
    for key, value in spec.items():
        values[key] = typed(value, hints[key], by_name[key].metadata, f"{where}: {key}")
    return cls(**values)


def typed(value: Any, hint: Any, meta: Dict[str, Any], where: str) -> Any:
    """One value read as its type hint says (Optional: None allowed); ints checked against meta's "min"."""
    if value is None and typing.get_origin(hint) is Union:
        return None
    wanted = base(hint)
    if wanted is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where} = {value!r} must be a whole number")
        if value < meta.get("min", value):
            raise UserError(f"{where} = {value} must be at least {meta['min']}")
    elif wanted is str:
        if isinstance(value, int) and not isinstance(value, bool) and where.endswith((": time", ": max_time")):
            key = where.rsplit(": ", 1)[1]
            raise UserError(f"{where} = {value}: YAML read an unquoted time as a number; quote it, e.g. "
                            f"{key}: \"12:00:00\"")
        value = text(value, where)
    elif wanted is bool:
        value = flag(value, where)
    elif wanted is list:
        value = value if isinstance(value, list) else texts(value, where)
    elif wanted is dict:
        value = mapping(value, where)
    return value


def base(hint: Any) -> Any:
    """The plain type of a hint: Optional[X] -> X, List[str] -> list, Dict[...] -> dict."""
    if typing.get_origin(hint) is Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def text(value: Any, where: str) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise UserError(f"{where} must be a single value, not a {kind(value)}")
    string = str(value)
    if any(ord(c) < 32 and c != "\t" for c in string) or "\t" in string:
        raise UserError(f"{where} = {string!r} holds a control character (newline, tab); remove it")
    return string


def texts(value: Any, where: str) -> List[str]:
    """A list of strings; one string written alone (`modules: apptainer`) is a list of one."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [text(item, f"{where} item") for item in items]


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where} = {value!r} must be true or false")
    return value


def env(value: Any, where: str) -> Dict[str, str]:
    """Values with ${setting} references (your settings file), $NAME (the job's own environment on the node, e.g.
    $LD_LIBRARY_PATH) and $$ (a literal $); nothing that runs a command."""
    found = {}
    for name, value_text in mapping(value, where).items():
        value_text = text(value_text, f"{where} {name}")
        if "$(" in value_text or "`" in value_text:
            raise UserError(f"{where} {name} = {value_text!r} runs a command; give the value itself (${{setting}} for "
                            f"your settings, $NAME for the node's environment, $$ for a literal $)")
        lone = ENV_TEXT.sub("", value_text)
        if "$" in lone:
            raise UserError(f"{where} {name} = {value_text!r} has a '$' that names nothing; write $$ for a literal $, "
                            f"$NAME for the node's environment or ${{setting}} for your settings")
        found[str(name)] = value_text
    return found


def plain_path(value: str, where: str, example: str) -> None:
    """An absolute path written as it is: nothing a directive or a shell line would split, expand or run."""
    if not value.startswith("/") or UNCARRIED.search(value):
        raise UserError(f"{where} = {value!r} is not an absolute path of letters, digits and '_./+@,=~-'; give the "
                        f"path itself, like {example}")


def directive_name(value: str, key: str, where: str) -> None:
    """A name a directive line carries unquoted (partition, qos, reservation, the GPU name a typed request uses)."""
    if value and not SAFE_NAME.match(value):
        raise UserError(f"{where}: {key} {value!r} has characters a scheduler directive cannot carry; use letters, "
                        f"digits, '_.-+'")


def constraint(value: str, where: str) -> None:
    if value and not CONSTRAINT.match(value):
        raise UserError(f"{where} = {value!r} is not a feature expression like gpu&hbm80g; use feature names "
                        f"joined by & or |, without quotes or $")


def mapping(value: Any, where: str) -> Dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a mapping (name: value), not a {kind(value)}")
    return value


def kind(value: Any) -> str:
    """What a YAML value is, in a message's words: list, mapping, string, empty value, int, ..."""
    return ({list: "list", dict: "mapping", str: "string", type(None): "empty value"}
            .get(type(value), type(value).__name__))


def only_keys(raw: Dict, allowed: List[str], where: str) -> None:
    if not isinstance(raw, dict):
        raise UserError(f"{where} must be a mapping, not a {kind(raw)}")
    for key in raw:
        if key not in allowed:
            raise UserError(unknown_name(f"key in {where}", key, sorted(allowed)))


def choice(value: Any, choices, where: str) -> str:
    if value not in choices:
        raise UserError(f"{where} is {value!r}; choose one of: {', '.join(choices)}")
    return value


def max_time(value: str, where: str, scheduler) -> None:
    """A partition's or QOS's time limit, in the words of `scheduler` (its adapter)."""
    if value and scheduler.time_seconds(value) is None:
        raise UserError(f"{where} max_time {value!r} is not a {scheduler.name} time limit; write it like "
                        f"{scheduler.time_example} (UNLIMITED where there is none)")


def module_init(value: Any, where: str) -> str:
    """The module system's init script: a plain path, sourced by the job."""
    path = text(value, where)
    if path:
        plain_path(path, where, "/usr/share/lmod/lmod/init/bash (the module system's init script)")
    return path


DURATION = re.compile(r"^(\d+)\s*([smh]?)$")
MIN_HANG_TIMEOUT_S = 10  # two heartbeats (CT_HEARTBEAT_S, 5 s): a shorter silence is not yet a hang


def duration_s(value: Any, where: str) -> int:
    """hang_timeout as seconds: a whole number of seconds, 90s, 10m or 1h; 0 for auto (the batch shell's watchdog
    takes max(300 s, 20 x the measured step time))."""
    if value == "auto":
        return 0
    found = DURATION.match(str(value).strip()) if not isinstance(value, (bool, float)) else None
    if not found:
        raise UserError(f"{where} = {value!r} is not a duration; write seconds (90), 90s, 10m, 1h or auto")
    seconds = int(found.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[found.group(2)]
    if seconds < MIN_HANG_TIMEOUT_S:
        raise UserError(f"{where} = {value!r} is {seconds} s, shorter than {MIN_HANG_TIMEOUT_S} s (two heartbeats of "
                        f"every rank); give at least {MIN_HANG_TIMEOUT_S}s, or auto")
    return seconds
