"""A ResolvedJob: every number and path one scheduler script needs, as jobs/resolve.py derives it from a cluster, a profile
and a resolved run config, in small typed pieces (what runs, where it runs, the image...); the adapters and templates
read it, the manifest records it flat (`as_dict`)."""
import dataclasses
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.scheduling.signing_policy import Policy
from cluster_train.host.scheduling.launches import LAUNCHES, Launch


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


def flat(piece: Any, keys: Dict[str, str]) -> Dict[str, Any]:
    """A piece's fields under the manifest's flat names (`keys`: field -> name, where the two differ)."""
    return {keys.get(name, name): value for name, value in dataclasses.asdict(piece).items()}


@dataclass
class Work:
    """What runs, wherever it runs: the entry point, its run directory and config, how its processes start, what
    they see (binds, environment, credentials by name, modules)."""

    entry: str  # what `python -m train` runs in the image: fit (a task) or command (your own code)
    launch: str
    ranks_per_node: int
    run_dir: str
    config_path: str
    log_path: str
    data_dir: str  # data.root: where the run reads its data (a data image's mount point)
    binds: List[str] = field(default_factory=list)  # "src:dst[:ro]", real paths resolved
    env: Dict[str, str] = field(default_factory=dict)
    # the trackers' credential variables (cluster_train/shared/tracker_config.py), forwarded into the container by name:
    # their values stay in the submitting environment, never in the script, the manifest or the run directory
    credentials: List[str] = field(default_factory=list)
    modules: List[str] = field(default_factory=list)
    module_init: str = ""
    tasks: List[Task] = field(default_factory=list)
    share_mount: bool = False  # the profile's share_mount: see shares_mount

    @property
    def shape(self) -> Launch:
        """How its processes start (cluster_train/host/scheduling/launches.py)."""
        return LAUNCHES[self.launch]

    @property
    def stops_by_file(self) -> bool:
        """The time-limit warning reaches the ranks as the segment's stop file (the trainer reads it, stop.py), not as a
        signal (your own code's)."""
        return self.entry == "fit"

    @property
    def shares_mount(self) -> bool:
        """A node's ranks join one container (apptainer --sharens): the image is mounted, and its pages read, once per
        node instead of once per rank. Only the trainer's: it takes the time-limit warning from the stop file, while a
        signal to a process that joined a shared container kills it (Apptainer 1.4 does not forward it), and your own
        code is warned by a signal. A scancel's or preemption's SIGTERM, which Slurm sends every process itself, so
        ends a node's joined ranks without a save: the profile's share_mount: false keeps a container per rank."""
        return self.share_mount and self.shape.one_parent_per_node and self.stops_by_file and self.ranks_per_node > 1


@dataclass
class Placement:
    """Where it runs: what the scheduler is asked for (partition, nodes, GPUs, CPUs, memory, time...), as the
    cluster file and the profile give it; the adapter spells it (cluster_train/host/schedulers/*.py directives())."""

    partition: str  # the cluster file's entry
    queue: str  # what the script names: that entry's scheduler partition (LSF queue), "" for the site's default
    nodes: int
    gpus_per_node: int
    tasks_per_node: int  # scheduler tasks per node: one per rank under srun/blaunch, one under Lightning
    cpus_per_task: int
    # memory per node, however the profile gives it; whole_node: the partition's mem_per_node_gb; None where it is
    # not known: no memory request (the site's default), or a whole node of unstated memory
    mem_gb: Optional[int]
    time: str  # as the profile writes it, in the scheduler's format: what the script says (--time=, -W)
    # the same limit in seconds, parsed once (jobs/resolve.py): what every check and cost reads; 0: no limit; None:
    # malformed (preflight refuses it)
    time_s: Optional[int] = 0
    # the partition's and the QOS's max_time in seconds (0: none), parsed with it
    partition_max_s: int = 0
    qos_max_s: int = 0
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
    grace_s: int = 300  # the time-limit warning comes this long before the limit
    max_requeues: int = 10
    hang_timeout_s: int = 0  # a rank without progress this long ends the job; 0: auto (from its step time)
    max_failures: int = 2  # requeues after a failure (a hang, a node's, a killed rank) per run
    spare_nodes: int = 0  # the partition's nodes beyond the job's: at most this many failed nodes may be left out
    directives: List[str] = field(default_factory=list)  # the profile's raw ones, after the adapter's own

    @property
    def slots_per_node(self) -> int:
        """LSF slots (cores) per host: -n counts slots, and rusage[mem] is per slot."""
        return self.tasks_per_node * self.cpus_per_task

    @property
    def max_segments(self) -> int:
        """The most allocations the run may take: its first start and each requeue."""
        return self.max_requeues + 1


@dataclass
class ImageRef:
    """The image that runs: exactly these bytes, what it was made from, who must have signed it, what it needs."""

    KEYS: ClassVar[Dict[str, str]] = {"path": "image", "sha256": "image_sha256", "flavor": "image_flavor",
                                      "registry": "image_registry", "signed_from": "image_signed_from",
                                      "parent_sha256": "image_parent_sha256"}
    path: str  # "" before one is built (check-cluster)
    sha256: str
    flavor: str
    nv: bool  # GPUs: apptainer --nv
    min_driver: str  # the oldest NVIDIA driver the image's CUDA runs on, checked on the node; "" without GPUs
    registry: Optional[Dict[str, Any]] = None  # where the image was pushed: {reference, plain_http}
    signed_from: str = ""  # a signed image: the sha256 of the build it was signed from
    parent_sha256: str = ""  # a derived image (images derive): the sha256 of the image it was built on
    signing: Policy = field(default_factory=Policy)  # require_signed and the allowed signers


@dataclass
class Fabric:
    """A multi-node GPU job on a fast fabric: NCCL logs its network choice, the job checks it
    (cluster_train/host/fabric.py); on Slingshot, the host's plugin and libfabric are bound in."""

    KEYS: ClassVar[Dict[str, str]] = {"check": "check_fabric", "name": "fabric", "paths": "fabric_paths",
                                      "library_path": "fabric_library_path"}
    check: bool = False
    name: str = ""  # the partition's fabric, where the job checks it
    paths: List[str] = field(default_factory=list)  # Slingshot: host paths bound in, checked before exec
    library_path: str = ""  # Slingshot: their directories in the container, first on LD_LIBRARY_PATH


@dataclass
class Notify:
    """Mail from the scheduler when the job begins and ends."""

    KEYS: ClassVar[Dict[str, str]] = {"wanted": "notify"}
    wanted: bool = False
    email: Optional[str] = None  # where to; None: the scheduler's default (the user's local mail)


@dataclass
class DataImage:
    """A data image (data.image): the stored SquashFS, its digest and name, bound read-only at the run's data_dir;
    `stage`: the node-local directory it is copied to first ("": read where it is stored)."""

    KEYS: ClassVar[Dict[str, str]] = {"path": "data_image", "sha256": "data_sha256", "name": "data_name",
                                      "size": "data_size", "stage": "data_stage",
                                      "stage_required": "data_stage_required"}
    path: str = ""
    sha256: str = ""
    name: str = ""
    size: int = 0
    stage: str = ""
    stage_required: bool = False


@dataclass
class ResolvedJob:
    """One request to a scheduler: what runs (`work`) kept apart from where it runs (`placement`), the image, the
    fabric check, mail and the data image, as jobs/resolve.py derives them; the adapter and its template render it,
    the manifest records it flat (`as_dict`, the keys runs already on disk hold)."""

    run_id: str
    cluster: str
    cluster_file: str
    profile: str
    scheduler: str
    job_name: str
    work: Work
    placement: Placement
    image: ImageRef
    fabric: Fabric = field(default_factory=Fabric)
    notify: Notify = field(default_factory=Notify)
    data: DataImage = field(default_factory=DataImage)
    scheduler_cluster: str = ""  # the cluster's name to its scheduler (Cluster.scheduler_cluster); "": `cluster`
    # `scheduler`'s adapter (a schedulers.Scheduler), looked up once, as jobs/resolve.py resolves the job: every check,
    # cost and command on the job asks it. Typed Any: the adapters sit above this room and render this record.
    adapter: Any = field(default=None, repr=False, compare=False)

    @property
    def total_ranks(self) -> int:
        return self.placement.nodes * self.work.ranks_per_node

    @property
    def driver_check_per_task(self) -> bool:
        """Every task checks its own node's NVIDIA driver too: the batch host's check covers one node only."""
        return bool(self.image.min_driver) and self.placement.nodes > 1

    def as_dict(self) -> Dict[str, Any]:
        """The manifest's flat record: one key per value, as runs already on disk hold them."""
        pieces = (self.work, self.placement, self.image, self.fabric, self.notify, self.data)
        return {**{name: getattr(self, name) for name in IDENTITY},
                **{key: value for piece in pieces for key, value in flat(piece, getattr(piece, "KEYS", {})).items()}}


IDENTITY = ("run_id", "cluster", "cluster_file", "profile", "scheduler", "job_name")


def new_run_id(cluster: str, profile: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{cluster}-{profile}-{secrets.token_hex(2)}"


def job_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    if not cleaned:
        raise UserError(f"experiment name {name!r} leaves no usable job name; use letters, digits, '_', '.', '-'")
    return cleaned
