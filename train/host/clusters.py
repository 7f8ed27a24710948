"""Cluster files (`clusters/<name>.yaml`): data, not code. This module reads and validates them.

A cluster file names its scheduler, its partitions (or LSF queues) with the hardware of one node and the image
flavor that node needs, environment and bind mounts for every job, and named profiles (job shapes).
"""
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from train.errors import UserError
from train.registry import unknown_name

SCHEDULERS = ("slurm", "lsf", "local")
LAUNCHES = ("srun", "lightning", "blaunch", "independent")
FLAVORS = ("cpu", "cuda11.6", "cuda12.8")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # what may appear unquoted in a scheduler directive


@dataclass
class Partition:
    name: str
    image: str  # image flavor whose CUDA can drive this partition's GPUs
    gpus_per_node: int = 0
    gpu_type: str = "none"
    gpu_mem_gb: int = 0
    cpus_per_node: int = 1
    mem_per_node_gb: int = 1
    nodes: int = 1


@dataclass
class Profile:
    name: str
    partition: str
    nodes: int = 1
    gpus_per_node: int = 0
    ranks_per_node: Optional[int] = None  # processes that train per node; defaults to the GPUs per node (or 1)
    cpus_per_task: int = 1
    mem_gb: int = 1  # per node
    time: str = "01:00:00"
    launch: Optional[str] = None  # srun | lightning | blaunch | independent; default from the scheduler
    description: str = ""
    trainer: Dict[str, Any] = field(default_factory=dict)  # forced onto the run config
    data: Dict[str, Any] = field(default_factory=dict)
    env: Dict[str, str] = field(default_factory=dict)
    directives: List[str] = field(default_factory=list)  # extra raw scheduler directives
    notify: bool = False  # mail at start and end (LSF -B -N, Slurm --mail-type=BEGIN,END)
    tasks: List[Dict[str, Any]] = field(default_factory=list)  # launch: independent -> [{name, set: {key: value}}]

    @property
    def ranks(self) -> int:
        if self.ranks_per_node is not None:
            return self.ranks_per_node
        return self.gpus_per_node or 1


@dataclass
class Cluster:
    name: str
    scheduler: str
    path: str
    description: str = ""
    nv: bool = True  # bind the NVIDIA driver into the container (apptainer --nv)
    needs: List[str] = field(default_factory=list)  # per-user settings this cluster cannot do without (account)
    modules: List[str] = field(default_factory=list)  # `module load` before the job starts (e.g. apptainer)
    binds: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    partitions: Dict[str, Partition] = field(default_factory=dict)
    profiles: Dict[str, Profile] = field(default_factory=dict)

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            raise UserError(unknown_name(f"profile of cluster {self.name!r}", name, sorted(self.profiles)))
        return self.profiles[name]

    def partition(self, name: str) -> Partition:
        if name not in self.partitions:
            kind = "queue" if self.scheduler == "lsf" else "partition"
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
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"cluster file {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    where = f"cluster file {path}"
    raw = {k: v for k, v in raw.items() if not str(k).startswith("x-")}  # x-*: YAML anchors, not settings
    _only_keys(raw, [f.name for f in dataclasses.fields(Cluster)] + ["apptainer"], where)
    apptainer = raw.get("apptainer") or {}
    cluster = Cluster(
        name=str(raw.get("name") or path.stem),
        scheduler=_choice(raw.get("scheduler"), SCHEDULERS, f"{where}: scheduler"),
        path=str(path),
        description=str(raw.get("description", "")),
        nv=bool(apptainer.get("nv", True)),
        binds=[str(b) for b in apptainer.get("binds", [])],
        env={str(k): str(v) for k, v in (raw.get("env") or {}).items()},
        needs=[str(n) for n in raw.get("needs", [])],
        modules=[str(m) for m in raw.get("modules", [])],
    )
    for name, spec in (raw.get("partitions") or {}).items():
        cluster.partitions[name] = _record(Partition, name, spec, f"{where}: partition {name!r}")
        _choice(cluster.partitions[name].image, FLAVORS, f"{where}: partition {name!r} image")
    for name, spec in (raw.get("profiles") or {}).items():
        profile = _record(Profile, name, spec, f"{where}: profile {name!r}")
        if profile.launch is not None:
            _choice(profile.launch, LAUNCHES, f"{where}: profile {name!r} launch")
        for task in profile.tasks:
            _only_keys(task, ["name", "set"], f"{where}: profile {name!r} task")
        cluster.profiles[name] = profile
    if not cluster.profiles:
        raise UserError(f"{where} defines no profiles; add one under 'profiles:'")
    return cluster


def _record(cls, name: str, spec: Any, where: str):
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _only_keys(spec, [n for n in fields if n != "name"], where)
    values = {"name": name}
    for key, value in spec.items():
        default = fields[key].default
        if isinstance(default, int) and not isinstance(default, bool) and not isinstance(value, int):
            raise UserError(f"{where}: {key} = {value!r} must be a whole number")
        values[key] = value
    return cls(**values)


def _only_keys(raw: Dict, allowed: List[str], where: str) -> None:
    if not isinstance(raw, dict):
        raise UserError(f"{where} must be a mapping")
    for key in raw:
        if key not in allowed:
            raise UserError(unknown_name(f"key in {where}", key, sorted(allowed)))


def _choice(value: Any, choices, where: str) -> str:
    if value not in choices:
        raise UserError(f"{where} is {value!r}; choose one of: {', '.join(choices)}")
    return value
