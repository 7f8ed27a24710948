"""Per-user settings (account, e-mail, scratch and data paths, modules): never in the repo.

File: $CT_SETTINGS, else $XDG_CONFIG_HOME/cluster-train/settings.yaml (~/.config/...). Top-level keys apply to
every cluster; a `clusters: {<name>: {...}}` section overrides them for one cluster.
"""
import os
import string
from pathlib import Path
from typing import Any, Dict

import yaml

from train.errors import UserError


def path() -> Path:
    if os.environ.get("CT_SETTINGS"):
        return Path(os.environ["CT_SETTINGS"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "cluster-train" / "settings.yaml"


def load(cluster: str) -> Dict[str, Any]:
    file = path()
    if not file.is_file():
        return {}
    try:
        raw = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"settings file {file} is not valid YAML: {str(err).splitlines()[0]}") from None
    per_cluster = (raw.pop("clusters", None) or {}).get(cluster) or {}
    return {**raw, **per_cluster}


def require(values: Dict[str, Any], key: str, cluster: str, why: str) -> Any:
    if values.get(key) in (None, ""):
        raise UserError(
            f"cluster {cluster!r} needs your {key} ({why}); set it in {path()} as "
            f"'clusters: {{{cluster}: {{{key}: ...}}}}' or top-level '{key}: ...'"
        )
    return values[key]


def expand(text: str, values: Dict[str, Any], cluster: str) -> str:
    """Fill `${scratch}`-style references in a cluster file's binds and environment from the user's settings."""
    found = (m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text))
    for name in filter(None, found):
        require(values, name, cluster, f"the cluster file refers to ${{{name}}}")
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})
