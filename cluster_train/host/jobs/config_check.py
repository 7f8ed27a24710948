"""Preflight for the run config itself, torch-free: every registered name, every parameter a constructor or task
takes, every input path, and the values the user set over the profile's. Each problem is one UserError."""
from pathlib import Path
from typing import Any, Dict, List, Sequence

from cluster_train.shared import config as cfg
from cluster_train.shared.catalog import CONFIG_KEYS, PARAMS_KEYS, REGISTRIES
from cluster_train.shared.errors import UserError
from cluster_train.host.clusters import Profile
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.jobs import run_refs
from cluster_train.host.jobs.resolve import profile_values
from cluster_train.shared.registry import NOT_LITERAL, REQUIRED, Registry, unknown_name

# the config key naming each registry whose entries take parameters from the config
NAME_KEYS = {kind: key for key, kind in CONFIG_KEYS.items()}
GPU_ACCELERATORS = ("gpu", "cuda")


def problems(run: cfg.RunConfig, awaited: Sequence[Path] = ()) -> List[UserError]:
    found = [err for key, kind in CONFIG_KEYS.items() for err in _name(REGISTRIES[kind], _get(run, key), key)]
    for kind, section in PARAMS_KEYS.items():
        name = _get(run, NAME_KEYS[kind])
        if name in REGISTRIES[kind]:
            found += _params(REGISTRIES[kind], name, _get(run, section), section)
    found += _inputs(run, awaited)
    return found


def user_choices(job: ResolvedJob, user_set: Dict[str, Any], profile: Profile) -> List[UserError]:
    """A value the user set over the profile's wins where it can run; where it cannot, say why."""
    found = []
    accelerator = user_set.get("trainer.accelerator")
    if accelerator in GPU_ACCELERATORS and job.placement.gpus_per_node == 0:
        found.append(UserError(f"trainer.accelerator={accelerator}: profile {job.profile!r} has no GPUs; drop the "
                               f"--set or choose a GPU profile"))
    if user_set.get("trainer.strategy") == "single" and job.total_ranks > 1:
        found.append(UserError(f"trainer.strategy=single trains in one process but profile {job.profile!r} starts "
                               f"{job.total_ranks} ranks; choose a distributed strategy or a 1-rank profile"))
    packed = {key for spec in profile.tasks for key in (spec.get("set") or {})}
    for key in sorted(packed & set(user_set)):
        found.append(UserError(f"--set {key}: profile {job.profile!r} packs tasks that each set {key} themselves; "
                               f"edit the profile's tasks instead"))
    return found


def overridden(user_set: Dict[str, Any], profile: Profile) -> Dict[str, Any]:
    """The profile's values the user's --set replaced: key -> the profile's value."""
    return {k: v for k, v in profile_values(profile).items() if k in user_set and user_set[k] != v}


def _name(registry: Registry, name: Any, key: str) -> List[UserError]:
    if isinstance(name, str) and name in registry:
        return []
    return [UserError(unknown_name(f"{key}", name, registry.names()) + f"; fix {key}")]


def _params(registry: Registry, name: str, given: Dict[str, Any], section: str) -> List[UserError]:
    accepted = registry.params(name)
    if accepted is None:  # the constructor takes **kwargs
        return []
    found = []
    for key, value in given.items():
        if key not in accepted:
            known = sorted(accepted) or ["(none)"]
            found.append(UserError(unknown_name(f"{section} key for {name}", key, known) + f"; fix {section}.{key}"))
            continue
        found += _param_type(value, accepted[key], f"{section}.{key}")
        for kind, item in _named_items(registry, name, key, value):
            found += _name(REGISTRIES[kind], item, f"{section}.{key}")
    for key, default in accepted.items():
        if default is REQUIRED and key not in given and section == "task_params":
            found.append(UserError(f"{section}.{key} is required by {name}; set it with --set {section}.{key}=..."))
    return found


def _param_type(value: Any, default: Any, key: str) -> List[UserError]:
    """A value whose default is a literal must be of the same kind (an int where 4 was, a list where [] was)."""
    if default in (None, REQUIRED, NOT_LITERAL) or value is None:
        return []
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,), list: (list, tuple), tuple: (list, tuple),
             dict: (dict,)}.get(type(default), (type(default),))
    if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, kinds):
        return [UserError(f"{key} = {value!r} must be a {type(default).__name__} like its default {default!r}")]
    return []


def _named_items(registry: Registry, name: str, key: str, value: Any):
    kind = registry.names_in(name).get(key)
    if kind is None:
        return []
    items = list(value) if isinstance(value, (list, tuple, dict)) else [value]  # a dict's keys are the names
    return [(kind, item) for item in items]


def _inputs(run: cfg.RunConfig, awaited: Sequence[Path]) -> List[UserError]:
    """Input paths that exist, or lie in a run the job waits on (that run writes them before the job starts)."""
    found = []
    for key, path in cfg.input_paths(run).items():
        if "," in path or ":" in path:  # apptainer -B splits its argument on both
            found.append(UserError(f"{key}: {path!r} holds ',' or ':', which apptainer cannot bind; rename it or "
                                   f"give a symlink without them"))
        elif not _exists(path) and not run_refs.inside(path, list(awaited)):
            fix = "create it (the generated data sets: make data)" if key == "data.root" else f"fix {key}"
            fix = "fix --data DIR (data.root), or create it" if key == "data.root" and run.command else fix
            shown = path if len(path) <= 200 else f"{path[:200]}... ({len(path)} characters)"
            found.append(UserError(f"{key}: {shown} does not exist; {fix}"))
    return found


def _exists(path: str) -> bool:
    try:
        return Path(path).exists()
    except OSError:  # a name too long for the file system, ...
        return False


def _get(run: cfg.RunConfig, dotted: str) -> Any:
    node: Any = run
    for part in dotted.split("."):
        node = getattr(node, part)
    return node
