"""A Job: every number and path one scheduler script needs, as jobs/resolve.py derives it from a cluster, a profile
and a resolved run config; templates read it, the manifest records it (`as_dict`)."""
import dataclasses
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from train.shared.errors import UserError
from train.host.clusters.signing_policy import Policy
from train.host.schedulers.launches import LAUNCHES, Launch


@dataclass
class Task:
    """One independent training of a `launch: independent` job, in its own run directory."""

    name: str  # log prefix: task-<i>-<name>
    run_dir: str
    config_path: str

    @property
    def results_path(self) -> str:
        """Where its training writes results.json (the batch shell sees from it that the task has finished)."""
        return f"{self.run_dir}/results.json"


@dataclass
class Job:
    run_id: str
    cluster: str
    cluster_file: str
    profile: str
    scheduler: str
    partition: str  # the cluster file's entry
    queue: str  # what the script names: that entry's scheduler partition (LSF queue), "" for the site's default
    nodes: int
    gpus_per_node: int
    ranks_per_node: int
    tasks_per_node: int  # scheduler tasks per node: one per rank under srun/blaunch, one under Lightning
    cpus_per_task: int
    # memory per node, however the profile gives it; whole_node: the partition's mem_per_node_gb; None where it is
    # not known: no memory request (the site's default), or a whole node of unstated memory
    mem_gb: Optional[int]
    time: str
    launch: str
    job_name: str
    run_dir: str
    config_path: str
    log_path: str
    image: str
    image_sha256: str
    image_flavor: str
    data_dir: str
    nv: bool
    min_driver: str  # the oldest NVIDIA driver the image's CUDA runs on, checked on the node; "" without GPUs
    check_fabric: bool  # a multi-node GPU job on a fast fabric: NCCL logs its network choice, the job checks it
    binds: List[str] = field(default_factory=list)  # "src:dst[:ro]", real paths resolved
    env: Dict[str, str] = field(default_factory=dict)
    # the trackers' credential variables (train/shared/tracker_config.py), forwarded into the container by name: their
    # values stay in the submitting environment, never in the script, the manifest or the run directory
    credentials: List[str] = field(default_factory=list)
    directives: List[str] = field(default_factory=list)
    modules: List[str] = field(default_factory=list)
    module_init: str = ""
    fabric: str = ""  # the partition's fabric, where the job checks it (train/host/fabric.py)
    fabric_paths: List[str] = field(default_factory=list)  # Slingshot: host paths bound in, checked before exec
    fabric_library_path: str = ""  # Slingshot: their directories in the container, first on LD_LIBRARY_PATH
    image_registry: Optional[Dict[str, Any]] = None  # where the image was pushed: {reference, plain_http}
    image_signed_from: str = ""  # a signed image: the sha256 of the build it was signed from
    image_parent_sha256: str = ""  # a derived image (images derive): the sha256 of the image it was built on
    signing: Policy = field(default_factory=Policy)  # require_signed and the allowed signers
    gpu_type: str = ""  # the scheduler's name of the GPU, for typed requests (scheduler_gpu_name, else gpu_type)
    gpu_request: str = "count"
    gpu_mem_gb: int = 0  # the least memory each GPU must have (LSF gmem)
    mem_per_gpu_gb: Optional[int] = None  # the profile's own way to give memory, rendered as such
    mem_per_cpu_gb: Optional[int] = None
    whole_node: bool = False  # all of each node's memory (Slurm --mem=0)
    node_mem_gb: Optional[int] = None  # the partition's mem_per_node_gb, where the cluster file states it
    cpu_bind: str = ""  # srun --cpu-bind
    hint: Optional[str] = None
    qos: str = ""
    constraint: str = ""  # the partition's features and the profile's, joined
    reservation: str = ""
    exclusive: bool = False
    account: Optional[str] = None
    email: Optional[str] = None
    notify: bool = False
    grace_s: int = 300  # the time-limit warning comes this long before the limit
    max_requeues: int = 10
    tasks: List[Task] = field(default_factory=list)
    # a data image (data.image): the stored SquashFS, its digest and name, bound read-only at data_dir; data_stage:
    # the node-local directory it is copied to first ("": read where it is stored)
    data_image: str = ""
    data_sha256: str = ""
    data_name: str = ""
    data_size: int = 0
    data_stage: str = ""
    data_stage_required: bool = False
    entry: str = "fit"  # what `python -m train` runs in the image: fit (a task) or command (your own code)

    @property
    def total_ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def shape(self) -> Launch:
        """How its processes start (train/host/schedulers/launches.py)."""
        return LAUNCHES[self.launch]

    @property
    def max_segments(self) -> int:
        """The most allocations the run may take: its first start and each requeue."""
        return self.max_requeues + 1

    @property
    def driver_check_per_task(self) -> bool:
        """Every task checks its own node's NVIDIA driver too: the batch host's check covers one node only."""
        return bool(self.min_driver) and self.nodes > 1

    @property
    def slots_per_node(self) -> int:
        """LSF slots (cores) per host: -n counts slots, and rusage[mem] is per slot."""
        return self.tasks_per_node * self.cpus_per_task

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def new_run_id(cluster: str, profile: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{cluster}-{profile}-{secrets.token_hex(2)}"


def job_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    if not cleaned:
        raise UserError(f"experiment name {name!r} leaves no usable job name; use letters, digits, '_', '.', '-'")
    return cleaned
