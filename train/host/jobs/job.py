"""Resolve "this cluster, this profile, this experiment" into one Job: every number the script needs.

The trainer's `devices` and `num_nodes` are derived here from the profile, never typed twice.
"""
import dataclasses
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from train import config as cfg
from train.errors import UserError
from train.host import fabric, project, settings
from train.host.clusters import Cluster, Profile, min_driver
from train.host.clusters.signing_policy import Policy, policy
from train.host.images import store
from train.host.schedulers import adapter


@dataclass
class Task:
    """One independent training of a `launch: independent` job, in its own run directory."""

    name: str  # log prefix: task-<i>-<name>
    run_dir: str
    config_path: str


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
    mem_gb: int  # per node, however the profile gives it
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
    check_fabric: bool  # a multi-node GPU job on InfiniBand: NCCL logs its network choice, the job checks it
    binds: List[str] = field(default_factory=list)  # "src:dst[:ro]", real paths resolved
    env: Dict[str, str] = field(default_factory=dict)
    directives: List[str] = field(default_factory=list)
    modules: List[str] = field(default_factory=list)
    module_init: str = ""
    image_registry: Optional[Dict[str, Any]] = None  # where the image was pushed: {reference, plain_http}
    image_signed_from: str = ""  # a signed image: the sha256 of the build it was signed from
    image_parent_sha256: str = ""  # a derived image (images derive): the sha256 of the image it was built on
    signing: Policy = field(default_factory=Policy)  # require_signed and the allowed signers
    gpu_type: str = ""  # the site's name of the GPU, for typed requests
    gpu_request: str = "count"
    gpu_mem_gb: int = 0  # the least memory each GPU must have (LSF gmem)
    mem_per_gpu_gb: Optional[int] = None  # the profile's own way to give memory, rendered as such
    mem_per_cpu_gb: Optional[int] = None
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
    entry: str = "fit"  # what `python -m train` runs in the image: fit (a task) or command (your own code)

    @property
    def total_ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def slots_per_node(self) -> int:
        """LSF slots (cores) per host: -n counts slots, and rusage[mem] is per slot."""
        return self.tasks_per_node * self.cpus_per_task

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def new_run_id(cluster: str, profile: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{cluster}-{profile}-{secrets.token_hex(2)}"


def resolve(
    cluster: Cluster,
    profile: Profile,
    run: cfg.RunConfig,
    task_runs: List[cfg.RunConfig],
    run_dir: Path,
    image: Optional[store.ImageRecord],
    image_flavor: str,
    user: Dict[str, Any],
) -> Job:
    """Every number and path the script needs, from configs already resolved (once) and settings already read."""
    scheduler = adapter(cluster.scheduler)
    launch = profile.launch or scheduler.default_launch
    for key in cluster.needs:
        settings.require(user, key, cluster.name, "the scheduler rejects jobs without it")
    per_task = launch in ("srun", "blaunch")
    tasks = independent_tasks(profile, run_dir) if launch == "independent" else []
    part = cluster.partition(profile.partition)
    tasks_per_node = len(tasks) or (profile.ranks if per_task else 1)
    env = {k: settings.expand_env(v, user, cluster.name) for k, v in {**cluster.env, **profile.env}.items()}
    check_fabric = part.fabric == "infiniband" and profile.nodes > 1 and profile.gpus_per_node > 0
    if run.code and not run.command:  # --dev: the snapshot's train package comes before the image's on the path
        env["PYTHONPATH"] = str(run_dir / "code")
    return Job(
        run_id=run_dir.name,
        cluster=cluster.name,
        cluster_file=cluster.path,
        profile=profile.name,
        scheduler=cluster.scheduler,
        partition=part.name,
        queue=part.scheduler_name,
        nodes=profile.nodes,
        gpus_per_node=profile.gpus_per_node,
        ranks_per_node=1 if tasks else profile.ranks,
        tasks_per_node=tasks_per_node,
        cpus_per_task=profile.cpus_per_task,
        mem_gb=node_memory_gb(profile, tasks_per_node),
        time=profile.time,
        launch=launch,
        job_name=job_name(run.name),
        run_dir=str(run_dir),
        config_path=str(run_dir / "config.yaml"),
        log_path=str(run_dir / "logs" / scheduler.log_name(job_name(run.name))),
        image=image.path if image else "",
        image_sha256=image.sha256 if image else "",
        image_flavor=image_flavor,
        data_dir=run.data.root,
        nv=cluster.nv and profile.gpus_per_node > 0,
        min_driver=min_driver(store.base_flavor(image_flavor)) if profile.gpus_per_node else "",
        check_fabric=check_fabric,
        binds=bind_mounts(cluster, task_runs or [run], run_dir, user),  # packed: only the tasks run
        env={**env, **(fabric.nccl_env(str(run_dir), env) if check_fabric else {})},
        directives=list(profile.directives),
        modules=list(cluster.modules) + settings.modules(user),
        module_init=cluster.module_init,
        image_registry=image.pushed[0] if image and image.pushed else None,
        image_signed_from=image.signed_from if image else "",
        image_parent_sha256=image.parent_sha256 if image else "",
        signing=policy(cluster.require_signed, cluster.signers, cluster.path, user, str(settings.path())),
        gpu_type=part.gpu_type,
        gpu_request=part.gpu_request,
        gpu_mem_gb=profile.gpu_mem_gb,
        mem_per_gpu_gb=profile.mem_per_gpu_gb,
        mem_per_cpu_gb=profile.mem_per_cpu_gb,
        hint=profile.hint,
        qos=profile.qos,
        constraint=scheduler.constraint_join.join(filter(None, (part.constraint, profile.constraint))),
        reservation=profile.reservation,
        exclusive=profile.exclusive,
        account=user.get("account"),
        email=user.get("email"),
        notify=profile.notify,
        grace_s=profile.grace_s,
        max_requeues=profile.max_requeues,
        tasks=tasks,
        entry="command" if run.command else "fit",
    )


def node_memory_gb(profile: Profile, tasks_per_node: int) -> int:
    """Memory per node, however the profile gives it (per node, per GPU or per CPU); 1 GB when it gives none."""
    if profile.mem_per_gpu_gb is not None:
        return profile.mem_per_gpu_gb * profile.gpus_per_node
    if profile.mem_per_cpu_gb is not None:
        return profile.mem_per_cpu_gb * profile.cpus_per_task * tasks_per_node
    return profile.mem_gb if profile.mem_gb is not None else 1


def bind_mounts(cluster: Cluster, runs: List[cfg.RunConfig], run_dir: Path, user: Dict[str, Any]) -> List[str]:
    """Every input path of the runs (data, expert checkpoints, weights) read-only, the run directory, and the
    cluster's own binds (scratch...). A path that is a symlink is bound at its real path too, so code that resolves
    it inside the container still finds it."""
    inputs = [path for run in runs for path in cfg.input_paths(run).values()]
    wanted = [(path, ":ro") for path in inputs] + [(str(run_dir), "")]
    wanted += [(settings.expand(b, user, cluster.name), "") for b in cluster.binds]
    binds: List[str] = []
    for path, mode in wanted:
        real = os.path.realpath(path)
        for dst in dict.fromkeys([real, path]):
            binds.append(f"{real}:{dst}{mode}")
    return list(dict.fromkeys(binds))


def independent_tasks(profile: Profile, run_dir: Path) -> List[Task]:
    tasks = []
    for i, spec in enumerate(profile.tasks):
        name = f"task-{i}-{job_name(str(spec.get('name', i)))}"
        tasks.append(Task(name=name, run_dir=str(run_dir / name), config_path=str(run_dir / name / "config.yaml")))
    return tasks


def run_config(raw: Dict[str, Any], overrides: Dict[str, Any], profile: Profile, run_dir: Path) -> cfg.RunConfig:
    """The run config, resolved once: the experiment, then what the profile sets, then the user's --set (which
    wins; preflight refuses a choice that cannot run), then what the job shape decides (ranks, nodes, paths)."""
    for key in ("devices", "num_nodes"):
        if key in profile.trainer:
            raise UserError(f"profile {profile.name!r} sets trainer.{key}; it is derived from nodes and gpus_per_node, remove it")
    independent = profile.launch == "independent"
    shape = {"trainer.devices": 1 if independent else profile.ranks, "trainer.num_nodes": 1 if independent else profile.nodes,
             "output_dir": str(run_dir)}
    return absolute_inputs(cfg.resolve(raw, {**profile_values(profile), **overrides, **shape}))


def profile_values(profile: Profile) -> Dict[str, Any]:
    """What a profile sets in the run config, as dotted keys."""
    return {**{f"trainer.{k}": v for k, v in profile.trainer.items()}, **{f"data.{k}": v for k, v in profile.data.items()}}


def task_configs(run: cfg.RunConfig, profile: Profile, tasks: List[Task], user: Dict[str, Any],
                 cluster: str) -> List[cfg.RunConfig]:
    """Each packed task's config, resolved once: the job's run config with the task's own `set:` values."""
    configs = []
    for spec, task in zip(profile.tasks, tasks):
        overrides = {k: settings.expand(v, user, cluster) if isinstance(v, str) else v
                     for k, v in (spec.get("set") or {}).items()}
        configs.append(absolute_inputs(cfg.resolve(cfg.to_dict(run), {**overrides, "output_dir": task.run_dir})))
    return configs


def absolute_inputs(run: cfg.RunConfig) -> cfg.RunConfig:
    """Input paths relative to the project root, as users write them, made absolute (the job runs elsewhere)."""
    for key, path in cfg.input_paths(run).items():
        if not Path(path).is_absolute():
            cfg.set_value(run, key, str((project.ROOT / path).resolve()))
    return run


def job_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    if not cleaned:
        raise UserError(f"experiment name {name!r} leaves no usable job name; use letters, digits, '_', '.', '-'")
    return cleaned
