"""Cluster files (`clusters/<name>.yaml`): data, not code. This module reads and validates them.

A cluster file names its scheduler, its partitions (or LSF queues) with the hardware of one node and the image
flavor that node needs, environment and bind mounts for every job, and named profiles (job shapes).
"""
import dataclasses
import functools
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from train.errors import UserError, raise_all
from train.host import project
from train.host.clusters import signing_policy
from train.host.schedulers import MODULE_NAME, SCHEDULERS, adapter
from train.registry import unknown_name
from train.yaml_file import load_yaml

LAUNCHES = ("srun", "lightning", "blaunch", "independent")
# How a site wants GPUs asked for: a count, the count of a GPU type (a100:4, LSF gmodel=), or Slurm's GRES syntax.
GPU_REQUESTS = ("count", "typed", "gres", "typed-gres")
HINTS = ("multithread", "nomultithread")
FABRICS = ("infiniband", "ethernet")  # between a partition's nodes; infiniband: multi-node jobs check NCCL used it
NO_PARTITION = "none"  # a partition entry whose jobs name no partition: the site's default, or a site without any
# A node feature expression (Slurm --constraint, LSF select[]): names and operators, nothing a directive cannot carry.
CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|()\[\]*!,:=<> -]+$")
# The pieces of an env value that mean something: $$, ${setting}, $NAME.
ENV_TEXT = re.compile(r"\$\$|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
# An NVIDIA driver version as nvidia-smi prints it (535.104.05, 470.82.01, 550.54).
DRIVER = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")
# A raw directive line is read by the scheduler, not a shell: one option; a newline would start a script line.
DIRECTIVE = re.compile(r"^-[^\x00-\x1f\x7f]*$")  # one option, no control characters


@dataclass
class Partition:
    """A kind of node a profile lands on: the scheduler's partition (or queue) and what one node holds."""

    name: str
    image: str  # image flavor whose CUDA can drive this partition's GPUs
    partition: str = ""  # the scheduler's name for it: the entry's own name by default; "none": name none
    gpus_per_node: int = field(default=0, metadata={"min": 0})
    gpu_type: str = "none"  # a GPU model of containers/flavors.yaml or the site's alias (rendered in typed requests)
    gpu_request: str = "count"  # count | typed | gres | typed-gres (GPU_REQUESTS)
    gpu_mem_gb: int = field(default=0, metadata={"min": 0})
    cpus_per_node: int = field(default=1, metadata={"min": 1})  # cores
    threads_per_core: int = field(default=1, metadata={"min": 1})  # hardware threads: Slurm's CPUs are threads
    mem_per_node_gb: int = field(default=1, metadata={"min": 1})
    nodes: int = field(default=1, metadata={"min": 1})
    constraint: str = ""  # node features that pick these nodes out of a shared partition (-C gpu)
    driver: str = ""  # the NVIDIA driver its nodes run, where the site states it: checked against the image's CUDA
    fabric: str = ""  # the network between its nodes (FABRICS), where the site states it

    @property
    def scheduler_name(self) -> str:
        """What the script names: "" for none."""
        name = self.partition or self.name
        return "" if name == NO_PARTITION else name


@dataclass
class Profile:
    name: str
    partition: str = ""  # an entry of the cluster's partitions; may be left out where the cluster has one
    nodes: int = field(default=1, metadata={"min": 1})
    gpus_per_node: int = field(default=0, metadata={"min": 0})
    ranks_per_node: Optional[int] = field(default=None, metadata={"min": 1})  # default: the GPUs per node (or 1)
    cpus_per_task: int = field(default=1, metadata={"min": 1})  # logical CPUs (hardware threads where a node has them)
    hint: Optional[str] = None  # multithread | nomultithread (Slurm --hint): nomultithread gives each CPU a core
    # Memory: per node (mem_gb), or per GPU or per CPU as the site prefers; one of the three (default mem_gb: 1)
    mem_gb: Optional[int] = field(default=None, metadata={"min": 1})
    mem_per_gpu_gb: Optional[int] = field(default=None, metadata={"min": 1})
    mem_per_cpu_gb: Optional[int] = field(default=None, metadata={"min": 1})
    gpu_mem_gb: int = field(default=0, metadata={"min": 0})  # the least memory each GPU must have
    qos: str = ""
    constraint: str = ""  # node features, added to the partition's own (Slurm --constraint, LSF select[])
    reservation: str = ""
    exclusive: bool = False  # whole nodes, shared with no other job
    time: str = "01:00:00"
    launch: Optional[str] = None  # srun | lightning | blaunch | independent; default from the scheduler
    description: str = ""
    trainer: Dict[str, Any] = field(default_factory=dict)  # forced onto the run config
    data: Dict[str, Any] = field(default_factory=dict)
    env: Dict[str, str] = field(default_factory=dict)
    directives: List[str] = field(default_factory=list)  # extra raw scheduler directives
    notify: bool = False  # mail at start and end (LSF -B -N, Slurm --mail-type=BEGIN,END)
    # Long runs: the scheduler warns this many seconds before the time limit, every rank saves a checkpoint and the
    # job requeues itself, at most max_requeues times per run.
    grace_s: int = field(default=300, metadata={"min": 10})
    max_requeues: int = field(default=10, metadata={"min": 0})
    tasks: List[Dict[str, Any]] = field(default_factory=list)  # launch: independent -> [{name, set: {key: value}}]

    @property
    def ranks(self) -> int:
        if self.ranks_per_node is not None:
            return self.ranks_per_node
        return self.gpus_per_node or 1

    @property
    def memory_keys(self) -> List[str]:
        return [key for key in ("mem_gb", "mem_per_gpu_gb", "mem_per_cpu_gb") if getattr(self, key) is not None]


@dataclass
class Cluster:
    name: str
    scheduler: str
    path: str
    description: str = ""
    nv: bool = True  # bind the NVIDIA driver into the container (apptainer --nv)
    needs: List[str] = field(default_factory=list)  # per-user settings this cluster cannot do without (account)
    modules: List[str] = field(default_factory=list)  # `module load` before the job starts (e.g. apptainer)
    module_init: str = ""  # the module system's init script, where a batch shell starts without `module`
    images: str = ""  # the image store this cluster's users share (a group directory); "": each user's own
    require_signed: bool = False  # run only images signed by a key of the user's keyring (train/host/images/signing.py)
    signers: List[str] = field(default_factory=list)  # ... and, if given, only by these key fingerprints
    binds: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    partitions: Dict[str, Partition] = field(default_factory=dict)
    profiles: Dict[str, Profile] = field(default_factory=dict)

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            raise UserError(unknown_name(f"profile of cluster {self.name!r}", name, sorted(self.profiles)))
        return self.profiles[name]

    def partition(self, name: str) -> Partition:
        if not name and len(self.partitions) == 1:
            return next(iter(self.partitions.values()))
        if not name:
            kind = adapter(self.scheduler).partition_word
            raise UserError(f"this profile of cluster {self.name!r} names no {kind} and the cluster has "
                            f"{len(self.partitions)}; add 'partition: NAME', one of: {', '.join(sorted(self.partitions))}")
        if name not in self.partitions:
            kind = adapter(self.scheduler).partition_word
            raise UserError(unknown_name(f"{kind} of cluster {self.name!r}", name, sorted(self.partitions)))
        return self.partitions[name]


def find(name_or_path: str, clusters_dir: Path) -> Path:
    """A cluster is a name in clusters/ or the path of a YAML file anywhere."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not candidate.is_file():
            raise UserError(f"cluster file {name_or_path!r} does not exist")
        return candidate
    path = clusters_dir / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in clusters_dir.glob("*.yaml"))
        raise UserError(unknown_name("cluster", name_or_path, known) + " (or the path of a cluster file)")
    return path


def load(path: Path) -> Cluster:
    raw = load_yaml(path, "cluster file")
    where = f"cluster file {path}"
    if not isinstance(raw, dict):
        raise UserError(f"{where} must hold a mapping (name:, scheduler:, partitions:, profiles:), not a {_kind(raw)}")
    raw = {k: v for k, v in raw.items() if not str(k).startswith("x-")}  # x-*: YAML anchors, not settings
    _only_keys(raw, [f.name for f in dataclasses.fields(Cluster)] + ["apptainer"], where)
    apptainer = _mapping(raw.get("apptainer"), f"{where}: apptainer")
    _only_keys(apptainer, ["nv", "binds"], f"{where}: apptainer")
    cluster = Cluster(
        name=_text(raw.get("name") or path.stem, f"{where}: name"),
        scheduler=_choice(raw.get("scheduler"), tuple(SCHEDULERS), f"{where}: scheduler"),
        path=str(path),
        description=_text(raw.get("description", ""), f"{where}: description"),
        nv=_flag(apptainer.get("nv", True), f"{where}: apptainer.nv"),
        binds=_texts(apptainer.get("binds"), f"{where}: apptainer.binds"),
        env=_env(raw.get("env"), f"{where}: env"),
        needs=_texts(raw.get("needs"), f"{where}: needs"),
        modules=_texts(raw.get("modules"), f"{where}: modules"),
        module_init=_text(raw.get("module_init", ""), f"{where}: module_init"),
        images=_text(raw.get("images", ""), f"{where}: images"),
        require_signed=signing_policy.flag(raw.get("require_signed", False), where),
        signers=signing_policy.fingerprints(raw.get("signers"), where),
    )
    for module in cluster.modules:
        if not MODULE_NAME.match(module):
            raise UserError(f"{where}: modules item {module!r} is not a module name like cuda/12.8")
    errors = []  # every partition's and profile's problems at once: a site maintainer fixes them in one go
    for name, spec in _mapping(raw.get("partitions"), f"{where}: partitions").items():
        try:
            cluster.partitions[name] = _partition(name, spec, f"{where}: partition {name!r}")
        except UserError as err:
            errors.append(err)
    for name, spec in _mapping(raw.get("profiles"), f"{where}: profiles").items():
        try:
            cluster.profiles[name] = _profile(name, spec, f"{where}: profile {name!r}")
        except UserError as err:
            errors.append(err)
    if not raw.get("profiles"):
        errors.append(UserError(f"{where} defines no profiles; add one under 'profiles:'"))
    raise_all(errors)
    return cluster


def _partition(name: str, spec: Any, where: str) -> Partition:
    part = _record(Partition, name, spec, where)
    _choice(part.image, image_flavors(), f"{where} image")
    _choice(part.gpu_request, GPU_REQUESTS, f"{where} gpu_request")
    _constraint(part.constraint, f"{where} constraint")
    if part.fabric:
        _choice(part.fabric, FABRICS, f"{where} fabric")
    if part.driver and not DRIVER.match(part.driver):
        raise UserError(f"{where} driver {part.driver!r} is not an NVIDIA driver version like \"535.104.05\" "
                        f"(nvidia-smi's Driver Version, in quotes)")
    try:
        gpu_model(part.gpu_type)
    except UserError as error:
        raise UserError(f"{where}: {error}") from None
    return part


def _profile(name: str, spec: Any, where: str) -> Profile:
    profile = _record(Profile, name, spec, where)
    if profile.launch is not None:
        _choice(profile.launch, LAUNCHES, f"{where} launch")
    if profile.hint is not None:
        _choice(profile.hint, HINTS, f"{where} hint")
    if len(profile.memory_keys) > 1:
        raise UserError(f"{where} sets {' and '.join(profile.memory_keys)}; a job's memory is given one way, "
                        f"keep one of them")
    if profile.mem_per_gpu_gb is not None and not profile.gpus_per_node:
        raise UserError(f"{where} gives memory per GPU but asks for no GPUs; use mem_gb (per node) instead")
    _constraint(profile.constraint, f"{where} constraint")
    profile.env = _env(profile.env, f"{where} env")
    profile.directives = _texts(profile.directives, f"{where} directives")
    for directive in profile.directives:
        if not DIRECTIVE.match(directive):
            raise UserError(f"{where}: directive {directive!r} must be one option starting with '-' on one "
                            f"line (no newline or control character); write one option per list item")
    for key in ("trainer", "data"):
        _mapping(getattr(profile, key), f"{where} {key}")
    if not isinstance(profile.tasks, list):
        raise UserError(f"{where}: tasks must be a list of {{name, set}} mappings")
    for task in profile.tasks:
        _only_keys(task, ["name", "set"], f"{where} task")
        _mapping(task.get("set"), f"{where} task {task.get('name')!r} set")
    return profile


def image_flavors() -> Tuple[str, ...]:
    """The image flavors, from containers/flavors.yaml: the one list of them."""
    return tuple(flavor_table()["flavors"])


@functools.lru_cache(maxsize=1)
def flavor_table() -> Dict[str, Any]:
    return load_yaml(project.ROOT / "containers" / "flavors.yaml", "flavor table")


def min_driver(flavor: str) -> str:
    """The oldest NVIDIA driver that runs a flavor's CUDA; "" for the CPU image."""
    return str(flavor_table()["flavors"].get(flavor, {}).get("min_driver", ""))


def driver_version(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def gpu_model(gpu_type: str) -> Tuple[str, Any]:
    """(model, compute capability) of a site's GPU name: a model of containers/flavors.yaml or one of its aliases,
    in any case; refused with the known models where it is neither."""
    wanted = gpu_type.lower()
    for model, spec in flavor_table()["gpus"].items():
        if wanted == model.lower() or wanted in (alias.lower() for alias in spec.get("aliases", ())):
            return model, spec["capability"]
    raise UserError(f"gpu_type {gpu_type!r} is not a GPU model or alias of containers/flavors.yaml; use one of: "
                    f"{', '.join(flavor_table()['gpus'])} (or add the model, or the site's name to its aliases, there)")


def _record(cls, name: str, spec: Any, where: str):
    """A partition or profile from its mapping, every value checked against the field's type and minimum."""
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be a mapping of keys, not a {_kind(spec)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _only_keys(spec, [n for n in fields if n != "name"], where)
    hints = typing.get_type_hints(cls)
    values = {"name": name}
    for key, value in spec.items():
        values[key] = _typed(value, hints[key], fields[key].metadata, f"{where}: {key}")
    return cls(**values)


def _typed(value: Any, hint: Any, meta: Dict[str, Any], where: str) -> Any:
    if value is None and typing.get_origin(hint) is Union:
        return None
    kind = _base(hint)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where} = {value!r} must be a whole number")
        if value < meta.get("min", value):
            raise UserError(f"{where} = {value} must be at least {meta['min']}")
    elif kind is str:
        if isinstance(value, int) and not isinstance(value, bool) and where.endswith(": time"):
            raise UserError(f"{where} = {value}: YAML read an unquoted time as a number; quote it, e.g. time: \"12:00:00\"")
        value = _text(value, where)
    elif kind is bool:
        value = _flag(value, where)
    elif kind is list:
        value = value if isinstance(value, list) else _texts(value, where)
    elif kind is dict:
        value = _mapping(value, where)
    return value


def _base(hint: Any) -> Any:
    if typing.get_origin(hint) is Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) or hint


def _text(value: Any, where: str) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise UserError(f"{where} must be a single value, not a {_kind(value)}")
    text = str(value)
    if any(ord(c) < 32 and c != "\t" for c in text) or "\t" in text:
        raise UserError(f"{where} = {text!r} holds a control character (newline, tab); remove it")
    return text


def _texts(value: Any, where: str) -> List[str]:
    """A list of strings; one string written alone (`modules: apptainer`) is a list of one."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [_text(item, f"{where} item") for item in items]


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where} = {value!r} must be true or false")
    return value


def _env(value: Any, where: str) -> Dict[str, str]:
    """Values with ${setting} references (your settings file), $NAME (the job's own environment on the node, e.g.
    $LD_LIBRARY_PATH) and $$ (a literal $); nothing that runs a command."""
    env = {}
    for name, text in _mapping(value, where).items():
        text = _text(text, f"{where} {name}")
        if "$(" in text or "`" in text:
            raise UserError(f"{where} {name} = {text!r} runs a command; give the value itself (${{setting}} for "
                            f"your settings, $NAME for the node's environment, $$ for a literal $)")
        lone = ENV_TEXT.sub("", text)
        if "$" in lone:
            raise UserError(f"{where} {name} = {text!r} has a '$' that names nothing; write $$ for a literal $, "
                            f"$NAME for the node's environment or ${{setting}} for your settings")
        env[str(name)] = text
    return env


def _constraint(value: str, where: str) -> None:
    if value and not CONSTRAINT.match(value):
        raise UserError(f"{where} = {value!r} is not a feature expression like gpu&hbm80g; use feature names "
                        f"joined by & or |, without quotes or $")


def _mapping(value: Any, where: str) -> Dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a mapping (name: value), not a {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {list: "list", dict: "mapping", str: "string", type(None): "empty value"}.get(type(value), type(value).__name__)


def _only_keys(raw: Dict, allowed: List[str], where: str) -> None:
    if not isinstance(raw, dict):
        raise UserError(f"{where} must be a mapping, not a {_kind(raw)}")
    for key in raw:
        if key not in allowed:
            raise UserError(unknown_name(f"key in {where}", key, sorted(allowed)))


def _choice(value: Any, choices, where: str) -> str:
    if value not in choices:
        raise UserError(f"{where} is {value!r}; choose one of: {', '.join(choices)}")
    return value
