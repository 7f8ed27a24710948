"""Cluster files (`clusters/<name>.yaml`): data, not code. This module reads and validates them.

A cluster file names its scheduler, its partitions (or LSF queues) with the hardware of one node and the image
flavor that node needs, environment and bind mounts for every job, and named profiles (job shapes).

The room:
  __init__.py        the schema (Cluster, Partition, Profile), find and load a cluster file
  fields.py          the typed-field readers: a raw YAML value checked as text, flag, env, mapping, choice, record
  flavors.py         containers/flavors.yaml: image flavors, the driver each needs, GPU models and their capability
"""
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import fabric
from cluster_train.host.clusters import fields, flavors
from cluster_train.host.schedulers import adapter
from cluster_train.host.scheduling import launches, signing_policy
from cluster_train.host.scheduling.facts import MODULE_NAME
from cluster_train.shared.registry import unknown_name
from cluster_train.shared.yaml_file import load_yaml

# How a site wants GPUs asked for: a count, the count of a GPU type (a100:4, LSF gmodel=), or Slurm's GRES syntax.
GPU_REQUESTS = ("count", "typed", "gres", "typed-gres")
HINTS = ("multithread", "nomultithread")
FABRICS = ("infiniband", "ethernet", "slingshot")  # between a partition's nodes; multi-node jobs check NCCL used
# the fast ones (cluster_train/host/fabric.py); slingshot: they bind the host's NCCL plugin and libfabric
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NO_PARTITION = "none"  # a partition entry whose jobs name no partition: the site's default, or a site without any
DRIVER = re.compile(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")  # an NVIDIA driver version as nvidia-smi prints it (535.104.05)
DIRECTIVE = re.compile(r"^-[^\x00-\x1f\x7f]*$")  # a raw directive: one option (a newline would start a script line)


@dataclass
class Partition:
    """A kind of node a profile lands on: the scheduler's partition (or queue) and what one node holds."""

    name: str
    image: str  # image flavor whose CUDA can drive this partition's GPUs
    partition: str = ""  # the scheduler's name for it: the entry's own name by default; "none": name none
    gpus_per_node: int = field(default=0, metadata={"min": 0})
    gpu_type: str = "none"  # a GPU model of containers/flavors.yaml or one of its aliases: the image checks read it
    scheduler_gpu_name: str = ""  # what typed requests name (a100:4, gmodel=); "": gpu_type, where it is a model
    gpu_request: str = "count"  # count | typed | gres | typed-gres (GPU_REQUESTS)
    gpu_mem_gb: int = field(default=0, metadata={"min": 0})
    cpus_per_node: int = field(default=1, metadata={"min": 1})  # cores
    threads_per_core: int = field(default=1, metadata={"min": 1})  # hardware threads: Slurm's CPUs are threads
    mem_per_node_gb: Optional[int] = field(default=None, metadata={"min": 1})  # None: the site does not say
    nodes: int = field(default=1, metadata={"min": 1})
    max_time: str = ""  # the longest time limit it takes, in the scheduler's format (sbatch --time, bsub -W)
    constraint: str = ""  # node features that pick these nodes out of a shared partition (-C gpu)
    driver: str = ""  # the NVIDIA driver its nodes run, where the site states it: checked against the image's CUDA
    fabric: str = ""  # the network between its nodes (FABRICS), where the site states it
    nccl_plugin: str = ""  # slingshot: host directory of the aws-ofi-nccl plugin (libnccl-net.so); ${setting}s
    libfabric: str = ""  # slingshot: host directory of libfabric.so.1 with its cxi provider
    fabric_libs: List[str] = field(default_factory=list)  # slingshot: host libraries libfabric loads (libcxi...)
    # node-local disk, where profiles with stage_data copy a data image: a path, $VARIABLES expanded on the node
    # ($TMPDIR, /local_scratch/$SLURM_JOB_ID); its size where the site states it (preflight checks the image fits)
    local_dir: str = ""
    local_disk_gb: Optional[int] = field(default=None, metadata={"min": 1})

    @property
    def scheduler_name(self) -> str:
        """What the script names: "" for none."""
        name = self.partition or self.name
        return "" if name == NO_PARTITION else name


@dataclass
class Qos:
    """A quality of service a profile may name (Slurm --qos), with the limits the site sets on it."""
    name: str
    max_time: str = ""  # the longest time limit a job of this QOS may ask for, in the scheduler's format


@dataclass
class Profile:
    name: str
    partition: str = ""  # an entry of the cluster's partitions; may be left out where the cluster has one
    nodes: int = field(default=1, metadata={"min": 1})
    gpus_per_node: int = field(default=0, metadata={"min": 0})
    ranks_per_node: Optional[int] = field(default=None, metadata={"min": 1})  # default: the GPUs per node (or 1)
    cpus_per_task: int = field(default=1, metadata={"min": 1})  # logical CPUs (hardware threads where a node has them)
    hint: Optional[str] = None  # multithread | nomultithread (Slurm --hint): nomultithread gives each CPU a core
    # Memory: per node (mem_gb), per GPU or per CPU as the site prefers, all of each node's (whole_node: Slurm's
    # --mem=0), or none of these: no memory request at all, the site's default
    mem_gb: Optional[int] = field(default=None, metadata={"min": 1})
    mem_per_gpu_gb: Optional[int] = field(default=None, metadata={"min": 1})
    mem_per_cpu_gb: Optional[int] = field(default=None, metadata={"min": 1})
    whole_node: bool = False
    gpu_mem_gb: int = field(default=0, metadata={"min": 0})  # the least memory each GPU must have
    qos: str = ""
    constraint: str = ""  # node features, added to the partition's own (Slurm --constraint, LSF select[])
    reservation: str = ""
    exclusive: bool = False  # whole nodes, shared with no other job
    time: str = ""  # in the scheduler's format; at most the partition's max_time; "": one hour (default_time)
    cpu_bind: str = ""  # how srun binds each task to CPUs (--cpu-bind=cores); "": the site's default
    share_mount: bool = True  # a node's srun ranks in one container (scheduling/job.py Work.shares_mount); false: one each
    launch: Optional[str] = None  # srun | lightning | blaunch | independent; default from the scheduler
    description: str = ""
    experiment: str = ""  # the experiment this profile is made for (packed tasks, a seed's shape): the default
    trainer: Dict[str, Any] = field(default_factory=dict)  # forced onto the run config
    data: Dict[str, Any] = field(default_factory=dict)
    # `tracker:` keys over the experiment's (a site whose nodes cannot reach the tracker: {offline: true})
    tracker: Dict[str, Any] = field(default_factory=dict)
    env: Dict[str, str] = field(default_factory=dict)
    directives: List[str] = field(default_factory=list)  # extra raw scheduler directives
    notify: bool = False  # mail at start and end (LSF -B -N, Slurm --mail-type=BEGIN,END)
    # Long runs: warned grace_s before the time limit, every rank saves and the job requeues itself (max_requeues).
    grace_s: int = field(default=300, metadata={"min": 10})
    max_requeues: int = field(default=10, metadata={"min": 0})
    hang_timeout: Any = "auto"  # a rank without progress this long ends the job (fields.duration_s: 90, 10m, auto)
    max_failures: int = field(default=2, metadata={"min": 0})  # requeues after a hang, a node's failure, a killed rank
    tasks: List[Dict[str, Any]] = field(default_factory=list)  # launch: independent -> [{name, set: {key: value}}]
    # copy the run's data image (data.image) to each node's local_dir before the ranks start; a copy that fails
    # falls back to the shared copy with a warning, or, stage_required, ends the job
    stage_data: bool = False
    stage_required: bool = False

    @property
    def ranks(self) -> int:
        if self.ranks_per_node is not None:
            return self.ranks_per_node
        return self.gpus_per_node or 1

    @property
    def memory_keys(self) -> List[str]:
        return [key for key in ("mem_gb", "mem_per_gpu_gb", "mem_per_cpu_gb", "whole_node")
                if getattr(self, key) not in (None, False)]


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
    runs: str = ""  # where run directories go, e.g. ${scratch}/cluster-train/runs; "": the checkout's runs/
    max_array_size: Optional[int] = None  # the site's job-array limit (Slurm MaxArraySize); default: the scheduler's
    scheduler_cluster: str = ""  # its name to its scheduler (ClusterName; "": name): only one serving it is asked
    require_signed: bool = False  # run only images signed by a key of the user's keyring (images/signing.py)
    signers: List[str] = field(default_factory=list)  # ... and, if given, only by these key fingerprints
    binds: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    partitions: Dict[str, Partition] = field(default_factory=dict)
    qos: Dict[str, Qos] = field(default_factory=dict)  # the QOS whose limits the site states (debug: 30 minutes)
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
                            f"{len(self.partitions)}; add 'partition: NAME', one of: "
                            f"{', '.join(sorted(self.partitions))}")
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
        raise UserError(f"{where} must hold a mapping (name:, scheduler:, partitions:, profiles:), "
                        f"not a {fields.kind(raw)}")
    raw = {k: v for k, v in raw.items() if not str(k).startswith("x-")}  # x-*: YAML anchors, not settings
    fields.only_keys(raw, [f.name for f in dataclasses.fields(Cluster)] + ["pipelines", "apptainer"], where)
    apptainer = fields.mapping(raw.get("apptainer"), f"{where}: apptainer")
    fields.only_keys(apptainer, ["nv", "binds"], f"{where}: apptainer")
    cluster = Cluster(
        name=fields.text(raw.get("name") or path.stem, f"{where}: name"),
        scheduler=adapter(raw.get("scheduler"), f"{where}: scheduler").name,
        path=str(path),
        **{key: fields.text(raw.get(key, ""), f"{where}: {key}") for key in ("description", "images", "runs",
                                                                            "scheduler_cluster")},
        nv=fields.flag(apptainer.get("nv", True), f"{where}: apptainer.nv"),
        binds=fields.texts(apptainer.get("binds"), f"{where}: apptainer.binds"),
        env=fields.env(raw.get("env"), f"{where}: env"),
        needs=fields.texts(raw.get("needs"), f"{where}: needs"),
        modules=fields.texts(raw.get("modules"), f"{where}: modules"),
        module_init=fields.module_init(raw.get("module_init", ""), f"{where}: module_init"),
        max_array_size=fields.typed(raw.get("max_array_size"), Optional[int], {"min": 1}, f"{where}: max_array_size"),
        require_signed=signing_policy.flag(raw.get("require_signed", False), where),
        signers=signing_policy.fingerprints(raw.get("signers"), where),
    )
    for module in cluster.modules:
        if not MODULE_NAME.match(module):
            raise UserError(f"{where}: modules item {module!r} is not a module name like cuda/12.8")
    errors = []  # every partition's and profile's problems at once: a site maintainer fixes them in one go
    for name, spec in fields.mapping(raw.get("partitions"), f"{where}: partitions").items():
        try:
            cluster.partitions[name] = _partition(name, spec, f"{where}: partition {name!r}", cluster.scheduler)
        except UserError as err:
            errors.append(err)
    for name, spec in fields.mapping(raw.get("qos"), f"{where}: qos").items():
        try:
            cluster.qos[name] = _qos(name, spec, f"{where}: qos {name!r}", cluster.scheduler)
        except UserError as err:
            errors.append(err)
    for name, spec in fields.mapping(raw.get("profiles"), f"{where}: profiles").items():
        try:
            cluster.profiles[name] = _profile(name, spec, f"{where}: profile {name!r}")
        except UserError as err:
            errors.append(err)
    if not raw.get("profiles"):
        errors.append(UserError(f"{where} defines no profiles; add one under 'profiles:'"))
    raise_all(errors)
    return cluster


def _partition(name: str, spec: Any, where: str, scheduler: str) -> Partition:
    part = fields.record(Partition, name, spec, where)
    fields.max_time(part.max_time, where, adapter(scheduler))
    fields.directive_name(part.scheduler_name, "partition", where)
    fields.directive_name(part.scheduler_gpu_name, "scheduler_gpu_name", where)
    fields.choice(part.image, flavors.image_flavors(), f"{where} image")
    fields.choice(part.gpu_request, GPU_REQUESTS, f"{where} gpu_request")
    fields.constraint(part.constraint, f"{where} constraint")
    if part.fabric:
        fields.choice(part.fabric, FABRICS, f"{where} fabric")
    fabric.check_keys(part.fabric, {key: getattr(part, key) for key in fabric.PATH_KEYS}, where)
    if part.driver and not DRIVER.match(part.driver):
        raise UserError(f"{where} driver {part.driver!r} is not an NVIDIA driver version like \"535.104.05\" "
                        f"(nvidia-smi's Driver Version, in quotes)")
    try:
        flavors.gpu_model(part.gpu_type)
    except UserError as error:
        raise UserError(f"{where}: {error}") from None
    return part


def _qos(name: str, spec: Any, where: str, scheduler: str) -> Qos:
    qos = fields.record(Qos, name, spec, where)
    fields.directive_name(str(name), "qos", where)
    fields.max_time(qos.max_time, where, adapter(scheduler))
    return qos


def _profile(name: str, spec: Any, where: str) -> Profile:
    if not PROFILE_NAME.match(str(name)):
        raise UserError(f"{where}: a profile's name goes into run ids, job names and file names; use letters, "
                        f"digits, '_', '.' and '-' (starting with a letter or digit)")
    profile = fields.record(Profile, name, spec, where)
    if profile.launch is not None:
        fields.choice(profile.launch, tuple(launches.LAUNCHES), f"{where} launch")
    if profile.hint is not None:
        fields.choice(profile.hint, HINTS, f"{where} hint")
    if len(profile.memory_keys) > 1:
        raise UserError(f"{where} sets {' and '.join(profile.memory_keys)}; a job's memory is given one way, "
                        f"keep one of them")
    if profile.mem_per_gpu_gb is not None and not profile.gpus_per_node:
        raise UserError(f"{where} gives memory per GPU but asks for no GPUs; use mem_gb (per node) instead")
    fields.constraint(profile.constraint, f"{where} constraint")
    fields.duration_s(profile.hang_timeout, f"{where}: hang_timeout")
    fields.directive_name(profile.qos, "qos", where)
    fields.directive_name(profile.reservation, "reservation", where)
    profile.env = fields.env(profile.env, f"{where} env")
    profile.directives = fields.texts(profile.directives, f"{where} directives")
    for directive in profile.directives:
        if not DIRECTIVE.match(directive):
            raise UserError(f"{where}: directive {directive!r} must be one option starting with '-' on one "
                            f"line (no newline or control character); write one option per list item")
    for key in ("trainer", "data"):
        fields.mapping(getattr(profile, key), f"{where} {key}")
    if not isinstance(profile.tasks, list):
        raise UserError(f"{where}: tasks must be a list of {{name, set}} mappings")
    for task in profile.tasks:
        fields.only_keys(task, ["name", "set"], f"{where} task")
        fields.mapping(task.get("set"), f"{where} task {task.get('name')!r} set")
    return profile
