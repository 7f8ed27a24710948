"""Per-user settings (account, e-mail, scratch and data paths, modules): never in the repo.

File: $CT_SETTINGS, else $XDG_CONFIG_HOME/cluster-train/settings.yaml (~/.config/...). Top-level keys apply to
every cluster; a `clusters: {<name>: {...}}` section overrides them for one cluster.

A room below the scheduler adapters (a site's own adapter is named in the settings: schedulers/site.py reads them):
  __init__.py               the settings file found, read and checked
  budget_setting.py         `budget:` (GPU-hours over a period)
  search_storage_setting.py `search_storage:` (a study's PostgreSQL database)
"""
import datetime
import difflib
import os
import re
import string
from pathlib import Path
from typing import Any, Dict, Iterable, List, Set, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.settings import budget_setting, search_storage_setting
from cluster_train.host.scheduling import signing_policy
from cluster_train.host import reach, undecodable
from cluster_train.host.scheduling.facts import BUILT_IN as BUILT_IN_SCHEDULERS, MODULE_NAME, SAFE_NAME
from cluster_train.shared.yaml_file import load_yaml


def path() -> Path:
    if undecodable.environ("CT_SETTINGS"):
        chosen = Path(os.environ["CT_SETTINGS"])
        if chosen.is_dir() or not chosen.exists():
            said = "is a directory, not a settings file" if chosen.is_dir() else "does not exist"
            raise UserError(f"$CT_SETTINGS {chosen} {said}; point it at your settings YAML file (or unset it)")
        return chosen
    base = Path(undecodable.environ("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "cluster-train" / "settings.yaml"


BUILT_IN = ("email", "account", "modules", "images", "runs", "require_signed", "signers", "clusters", "tracker",
            "schedulers", "budget", "search_storage", *reach.KEYS)  # every other key is a value cluster files refer to
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
PATHS = ("scratch", "images")  # settings read as directories (runs: is checked once ${scratch} is filled in)


def load(cluster: str) -> Dict[str, Any]:
    """The settings for one cluster (top-level keys, then its `clusters:` entry over them), checked."""
    file = path()
    if not file.is_file():
        return {}
    raw = load_yaml(file, "settings file")
    if raw is None:
        return {}
    where = f"settings file {file}"
    if not isinstance(raw, dict):
        raise UserError(f"{where} must hold a mapping (email:, clusters: "
                        f"{{NAME: {{account: ...}}}}), not a list or value")
    per_cluster = raw.pop("clusters", None) or {}
    if not isinstance(per_cluster, dict) or not all(isinstance(v, dict) or v is None for v in per_cluster.values()):
        raise UserError(f"{where}: clusters must map each cluster name to its settings, e.g. clusters: "
                        f"{{gilbreth: {{account: lusu}}}}")
    values = {**raw, **(per_cluster.get(cluster) or {})}
    for key, value in values.items():
        check(str(key), value, where)
    return values


def site_scheduler(name: str) -> Tuple[str, str]:
    """Where the top-level `schedulers:` (NAME: MODULE[:CLASS] or /path/FILE.py[:CLASS]) says scheduler `name`'s
    adapter is ("" where it does not), and the settings file, for messages. Read only for a name not built in."""
    file = path()
    raw = load_yaml(file, "settings file") if file.is_file() else None
    found = raw.get("schedulers") if isinstance(raw, dict) else None
    if found is None:
        return "", ""
    _schedulers(found, f"settings file {file}")
    return str(found.get(name) or ""), f"settings file {file}"


def unread_keys(referenced: Iterable[str]) -> List[str]:
    """The settings file's keys nothing reads: not cluster-train's own and not a value any cluster file refers to
    (`referenced`, their ${name}s), as `key` or `clusters.NAME.key`. load() lets such a key be (it may be a value
    for a cluster file elsewhere), so a misspelt `scrach:` fails only when a job expands ${scratch}; doctor names it."""
    file = path()
    raw = load_yaml(file, "settings file") if file.is_file() else None
    if not isinstance(raw, dict):
        return []
    known = {*BUILT_IN, *PATHS, *referenced}
    per_cluster = raw.get("clusters") if isinstance(raw.get("clusters"), dict) else {}
    found = [str(key) for key in raw if str(key) not in known]
    return found + [f"clusters.{name}.{key}" for name, values in per_cluster.items() if isinstance(values, dict)
                    for key in values if str(key) not in known]


def references(text: str) -> Set[str]:
    """The settings a cluster file's text refers to, read as `expand` reads them: ${name} and $name."""
    return {m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text)} - {None}


def check(key: str, value: Any, where: str) -> None:
    close = difflib.get_close_matches(key, BUILT_IN, n=1, cutoff=0.75)
    if key not in BUILT_IN and close:
        raise UserError(f"{where}: unknown key {key!r} (did you mean {close[0]!r}?)")
    if key in NOT_SCALARS:
        NOT_SCALARS[key](value, where)
        return
    text = _scalar(f"{where}: {key}", value)
    if key == "email" and not EMAIL.match(text):
        raise UserError(f"{where}: email {text!r} is not one address like you@university.edu; fix email")
    if key in PATHS and "${" not in text and not Path(text).expanduser().is_absolute():
        raise UserError(f"{where}: {key} {text!r} is not an absolute path; jobs run elsewhere, so write it like "
                        f"{key}: /scratch/$USER (or ~/...)")
    if key in reach.KEYS:
        reach.check(key, text, where)
    if key == "account" and not SAFE_NAME.match(text):
        raise UserError(f"{where}: account {text!r} has characters a scheduler directive cannot carry; "
                        f"use letters, digits, '_.-+'")


def _modules(value: Any, where: str) -> None:
    for item in value if isinstance(value, list) else [value]:
        if not MODULE_NAME.match(_scalar(f"{where}: modules", item)):
            raise UserError(f"{where}: modules item {str(item)[:60]!r} is not a module name "
                            "like cuda/12.8; fix modules")


def _schedulers(value: Any, where: str) -> None:
    """A site's own adapters by name; a built-in name would shadow a scheduler every cluster file relies on."""
    if not isinstance(value, dict):
        raise UserError(f"{where}: schedulers must map a scheduler name to its adapter, e.g. "
                        f"schedulers: {{pbs: /path/to/my_pbs.py}} or {{pbs: my_site.pbs:Pbs}}")
    for name, target in value.items():
        if str(name) in BUILT_IN_SCHEDULERS:
            raise UserError(f"{where}: schedulers: {name!r} is a built-in scheduler's name; give your adapter "
                            f"another name")
        if not SAFE_NAME.match(str(name)):
            raise UserError(f"{where}: schedulers: {str(name)[:60]!r} is not a scheduler name; use letters, "
                            f"digits, '_.-+'")
        _scalar(f"{where}: schedulers: {name}", target)


def _tracker(value: Any, where: str) -> None:
    """A name, a list or a mapping: checked where it goes, in the run config each job resolves
    (cluster_train/shared/tracker_config.py)."""


NOT_SCALARS = {"modules": _modules, "require_signed": signing_policy.flag, "signers": signing_policy.fingerprints,
               "tracker": _tracker, "schedulers": _schedulers,
               "budget": lambda value, where: budget_setting.parse(value, where, datetime.datetime.now()),
               "search_storage": search_storage_setting.check}


def _scalar(where: str, value: Any) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise UserError(f"{where} must be a single value, not "
                        f"{'a list' if isinstance(value, list) else 'a mapping' if value is not None else 'empty'}")
    text = str(value)
    if any(ord(c) < 32 or c == "\x7f" for c in text):
        raise UserError(f"{where} = {text!r} holds a newline or control character; remove it")
    return text


def modules(values: Dict[str, Any]) -> List[str]:
    """`modules: apptainer` alone is a list of one module, not of characters."""
    found = values.get("modules") or []
    return [str(m) for m in (found if isinstance(found, list) else [found])]


def require(values: Dict[str, Any], key: str, cluster: str, why: str) -> Any:
    if values.get(key) in (None, ""):
        raise UserError(
            f"cluster {cluster!r} needs your {key} ({why}); set it in {path()} as "
            f"'clusters: {{{cluster}: {{{key}: ...}}}}' or top-level '{key}: ...'"
        )
    return values[key]


SETTING = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(text: str, values: Dict[str, Any], cluster: str) -> str:
    """An environment value with its ${setting} references filled in; $NAME (the node's environment at job time)
    and $$ (a literal $) stay for the job script, so a setting's own '$' is written $$."""
    def fill(match: "re.Match") -> str:
        if match.group(1) is None:
            return match.group(0)
        value = require(values, match.group(1), cluster, f"the cluster file refers to ${{{match.group(1)}}}")
        return str(value).replace("$", "$$")
    return SETTING.sub(fill, text)


def expand(text: str, values: Dict[str, Any], cluster: str) -> str:
    """Fill `${scratch}`-style references in a cluster file's binds and packed tasks' values from the user's
    settings (environment values: `expand_env`)."""
    found = (m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text))
    for name in filter(None, found):
        require(values, name, cluster, f"the cluster file refers to ${{{name}}}")
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})
