"""Your own config, as preflight sees it: the experiment's `reads:` names which keys of your YAML mean the numbers
preflight checks (`reads: {devices: Trainer.devices, num_workers: Dataset.num_workers, ...}`).

Values read this way go into the run config (data.num_workers, ...), so the registered tasks' checks (host RAM,
CPUs per worker, bf16 on V100) apply to your code unchanged; their messages then name your key and file. devices
and num_nodes are compared with the profile instead: Lightning waits for devices x num_nodes ranks, and a job that
starts another number hangs (seed 003).
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.shared.registry import unknown_name
from cluster_train.shared.yaml_file import load_yaml_text

# reads key -> the run config key it fills (None: compared with the profile instead)
RUN_KEYS = {"devices": None, "num_nodes": None, "num_workers": "data.num_workers", "batch_size": "data.batch_size",
            "precision": "trainer.precision", "accumulate_grad_batches": "trainer.accumulate_grad_batches",
            "data_root": "data.root"}
NUMBERS = ("devices", "num_nodes", "num_workers", "batch_size", "accumulate_grad_batches")
# what each check needs, for the summary's "not checked" line
CHECKS = {"devices": "devices against the profile's GPUs per node", "num_nodes": "num_nodes against the profile's",
          "num_workers": "dataloader workers against CPUs and host RAM", "batch_size": "the effective batch size"}


@dataclass
class UserConfig:
    file: str  # relative to the code directory
    values: Dict[str, Any] = field(default_factory=dict)  # reads key -> value found
    keys: Dict[str, str] = field(default_factory=dict)  # reads key -> your key (Trainer.devices)

    def where(self, name: str) -> str:
        return f"{self.keys[name]} in {self.file}"


def read(run: cfg.RunConfig, text_of: Callable[[str], Optional[str]]) -> Optional[UserConfig]:
    """The values `reads:` names, from the user's YAML in the code snapshot (`text_of` a file's text, by its path
    relative to code:); None without a mapping."""
    mapping = dict(run.reads)
    if not mapping:
        return None
    rel = mapping.pop("file", None) or first_yaml(run.command)
    for key in mapping:
        if key not in RUN_KEYS:
            raise UserError(unknown_name("reads key", key, ["file", *RUN_KEYS]) + "; fix reads:")
    if not rel:
        raise UserError("reads: names keys but no file to read them from; add reads.file: (relative to code:) or "
                        "pass the YAML in command:")
    text = text_of(rel)
    if text is None:
        raise UserError(f"reads.file: {rel} is not a file in {run.code}; fix reads.file (relative to code:)")
    tree = load_yaml_text(text, f"{rel} in {run.code}") or {}
    found = UserConfig(rel, keys=mapping)
    for name, dotted in mapping.items():
        value = lookup(tree, dotted)
        if value is not None:
            found.values[name] = checked(name, value, f"{dotted} in {rel}")
    return found


def first_yaml(command: List[str]) -> str:
    return next((arg for arg in command if arg.endswith((".yaml", ".yml"))), "")


def lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def checked(name: str, value: Any, where: str) -> Any:
    if name in NUMBERS and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UserError(f"{where} = {value!r}: cluster-train reads it as {name}, which must be a whole number; "
                        f"fix it there or the reads: mapping")
    return str(value) if name in ("precision", "data_root") else value


def apply(run: cfg.RunConfig, found: Optional[UserConfig], code: Path) -> None:
    """Fill the run config with what the user's config says; what it does not say is not checked (workers: 0)."""
    values = found.values if found else {}
    for name, key in RUN_KEYS.items():
        if key and name in values and not (name == "precision" and values[name] not in cfg_precisions()):
            value = values[name]
            if name == "data_root" and not Path(value).is_absolute():
                value = str((code / value).resolve())  # relative to the user's project, where their code runs
            cfg.set_value(run, key, value)
    if "num_workers" not in values:
        run.data.num_workers = 0


def cfg_precisions():
    from cluster_train.shared.strategies import PRECISIONS  # torch-free

    return PRECISIONS


def shape_problems(found: Optional[UserConfig], profile_name: str, ranks_per_node: int, nodes: int) -> List[UserError]:
    """devices and num_nodes in the user's config must be what the job starts, or Lightning waits forever."""
    if not found:
        return []
    errors = []
    for name, have, unit in (("devices", ranks_per_node, "rank(s) per node, one per GPU"),
                             ("num_nodes", nodes, "node(s)")):
        value = found.values.get(name)
        if value is not None and value != have:
            errors.append(UserError(
                f"{found.where(name)} is {value} but profile {profile_name!r} starts {have} {unit}: Lightning would "
                f"wait for ranks that never come and the job would hang; set {found.keys[name]}: {have} there or "
                f"choose a profile with {value}"))
    return errors


def set_over(found: Optional[UserConfig], user_set: Dict[str, Any]) -> List[UserError]:
    """A --set of a key your code reads from its own config would change nothing it runs: say where to change it."""
    if not found:
        return []
    return [UserError(f"--set {key}: your code reads {found.where(name)}, not cluster-train's {key}; change it there")
            for name, key in RUN_KEYS.items() if key in user_set and name in found.keys]


def in_user_terms(errors: List[UserError], found: Optional[UserConfig]) -> List[UserError]:
    """A check's message names the run config key; for a value read from the user's config, name theirs."""
    if not found:
        return errors
    renamed = []
    for err in errors:
        text = str(err)
        for name, value in found.values.items():
            key = RUN_KEYS[name]
            if key and key in text:
                text = text.replace(key, found.keys[name]) + f" (in {found.file})"
        renamed.append(UserError(text))
    return renamed


def unchecked(found: Optional[UserConfig]) -> List[str]:
    values = found.values if found else {}
    return [what for name, what in CHECKS.items() if name not in values]
