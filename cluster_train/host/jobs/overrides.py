"""The overrides of a request, as every door gives them (the API's typed mapping, the command line's --set lines),
typed once here; and the refusal of keys the cluster profile decides."""
import dataclasses
from typing import Any, Dict, List, Mapping, Sequence, Union

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host import undecodable
from cluster_train.host.clusters import Profile

DERIVED = ("trainer.devices", "trainer.num_nodes", "output_dir")
PROFILE_KEYS = {f.name for f in dataclasses.fields(Profile)} - {"name", "trainer", "data", "tracker", "description"}

Overrides = Union[Mapping[str, Any], Sequence[str]]  # typed values, or --set KEY=TEXT lines


def typed_overrides(*given: Overrides) -> Dict[str, Any]:
    """Overrides as every door gives them, merged in order (a later key wins) and typed once: a mapping's values
    as they are (the API's Python values), KEY=TEXT lines (--set's, or a list given to the API) by the config
    schema (parse_settings). Bytes that are not UTF-8 are refused first, named as --set names them."""
    typed: Dict[str, Any] = {}
    for overrides in given:
        if isinstance(overrides, Mapping):
            for key, value in overrides.items():
                undecodable.refuse_setting("--set", f"{key}={value}" if isinstance(value, str) else str(key))
        else:
            for line in overrides:
                undecodable.refuse_setting("--set", line)
        typed.update(cfg.parse_settings(overrides if isinstance(overrides, Mapping) else list(overrides)))
    return typed


def user_overrides(overrides: Union[Mapping[str, Any], List[str]], cluster_file: str) -> Dict[str, Any]:
    """--set values, refusing the keys a profile decides: a job setting belongs to the cluster file."""
    parsed = cfg.parse_settings(overrides)
    for key in parsed:
        if key in DERIVED:
            raise UserError(f"{key} is derived from the cluster profile; choose another profile instead of --set {key}")
        if key in PROFILE_KEYS:
            raise UserError(f"--set {key}: {key} is a job setting of the cluster profile, not of the run config; "
                            f"choose another profile or edit it in {cluster_file}")
    return parsed
