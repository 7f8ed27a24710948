"""Resolve "this cluster, this profile, this experiment" into one ResolvedJob: every number the script needs, from configs
resolved once and settings read once (cluster_train/host/jobs/build.py calls these in order).

The trainer's `devices` and `num_nodes` are derived here from the profile, never typed twice.
"""
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_train.shared import config as cfg
from cluster_train.shared import tracker_config
from cluster_train.shared.errors import UserError
from cluster_train.host import fabric, project, settings
from cluster_train.host.clusters import Cluster, Partition, Profile, fields
from cluster_train.host.clusters.flavors import min_driver
from cluster_train.host.scheduling.signing_policy import policy
from cluster_train.host.images import store
from cluster_train.host.jobs import memory
from cluster_train.host.scheduling.job import DataImage, Fabric, ImageRef, ResolvedJob, Notify, Placement, Task, Work, job_name
from cluster_train.host.schedulers import Scheduler, adapter
from cluster_train.host.scheduling.launches import LAUNCHES, Launch

# where a command's data image is mounted when it names no data.root: a path of its own, which no site binds
# (docs/how-to/own-code.md); $CT_DATA_ROOT says it to the command
COMMAND_DATA_MOUNT = "/mnt/ct-data"


def launch_of(profile: Profile, scheduler: Scheduler) -> Launch:
    """The profile's launch shape, else its scheduler's usual one."""
    return LAUNCHES[profile.launch or scheduler.default_launch]


def resolve(cluster: Cluster, profile: Profile, run: cfg.RunConfig, task_runs: List[cfg.RunConfig], run_dir: Path,
            image: Optional[store.ImageRecord], image_flavor: str, user: Dict[str, Any],
            data_fields: Optional[Dict[str, Any]] = None, shape: Optional[Launch] = None) -> ResolvedJob:
    """Every number and path the script needs, from configs already resolved (once) and settings already read;
    `data_fields`: the data image's (cluster_train/host/data/binding.py); `shape`: the launch shape, where the build
    has it already."""
    scheduler = adapter(cluster.scheduler)
    for key in cluster.needs:
        settings.require(user, key, cluster.name, "the scheduler rejects jobs without it")
    part = cluster.partition(profile.partition)
    name = job_name(run.name)
    net = slingshot_of(cluster, profile, part, user)
    shape = shape or launch_of(profile, scheduler)
    tasks = independent_tasks(profile, run_dir) if shape.packed else []
    tasks_per_node = len(tasks) or (profile.ranks if shape.task_per_rank else 1)
    return ResolvedJob(
        run_id=run_dir.name, cluster=cluster.name, cluster_file=cluster.path, profile=profile.name,
        scheduler=cluster.scheduler, job_name=name, adapter=scheduler,
        work=work_of(cluster, profile, run, task_runs, run_dir, user, shape, tasks, scheduler.log_name(name), net),
        placement=placement_of(cluster, profile, part, scheduler, user, tasks_per_node),
        image=image_of(image, image_flavor, profile.gpus_per_node, cluster, user),
        fabric=fabric_of(profile, part, net), notify=Notify(wanted=profile.notify, email=user.get("email")),
        data=DataImage(**(data_fields or {})), scheduler_cluster=cluster.scheduler_cluster or cluster.name,
    )


def work_of(cluster: Cluster, profile: Profile, run: cfg.RunConfig, task_runs: List[cfg.RunConfig], run_dir: Path,
            user: Dict[str, Any], shape: Launch, tasks: List[Task], log_name: str,
            net: Optional[fabric.Slingshot]) -> Work:
    """What runs: the entry point, the run directory, how many processes start (packed tasks, one per rank, or one
    per host), what they see (binds, environment, credentials by name, modules)."""
    env = {k: settings.expand_env(v, user, cluster.name) for k, v in {**cluster.env, **profile.env}.items()}
    if profile.gpus_per_node:  # entries for the NCCL flight recorder the hang watchdog's dump request saves
        env.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
    if run.code and not run.command:  # --dev: the snapshot's cluster_train package comes before the image's on the path
        env["PYTHONPATH"] = str(run_dir / "code")
    if run.command and run.data.root and not run.data.image:  # a data image's shell code exports its own
        # your code finds the bound directory here; $$: a $ in the path is text, not a variable of the node (env_word)
        env["CT_DATA_ROOT"] = run.data.root.replace("$", "$$")
    if checks_fabric(profile, cluster.partition(profile.partition)):
        env.update(fabric.nccl_env(str(run_dir), env, cluster.partition(profile.partition).fabric))
    return Work(
        entry="command" if run.command else "fit", launch=shape.name, ranks_per_node=1 if tasks else profile.ranks,
        run_dir=str(run_dir), config_path=str(run_dir / "config.yaml"), log_path=str(run_dir / "logs" / log_name),
        data_dir=run.data.root, tasks=tasks, share_mount=profile.share_mount,
        binds=bind_mounts(cluster, task_runs or [run], run_dir, user)  # packed: only the tasks run
        + (net.binds if net else []),
        env=env, credentials=tracker_config.credentials(run.tracker),
        modules=list(cluster.modules) + settings.modules(user), module_init=cluster.module_init,
    )


def placement_of(cluster: Cluster, profile: Profile, part: Partition, scheduler: Scheduler, user: Dict[str, Any],
                 tasks_per_node: int) -> Placement:
    """Where it runs: what the job asks of the scheduler (queue, shape, memory, time, GPU type, QOS, account...);
    its time limits in seconds, parsed here once (None: malformed, which preflight refuses beside every other
    problem)."""
    time_limit, qos = profile.time or scheduler.default_time, cluster.qos.get(profile.qos)
    return Placement(
        partition=part.name, queue=part.scheduler_name, nodes=profile.nodes, gpus_per_node=profile.gpus_per_node,
        tasks_per_node=tasks_per_node, cpus_per_task=profile.cpus_per_task,
        mem_gb=memory.node_memory_gb(profile, part, tasks_per_node), time=time_limit,
        time_s=seconds(scheduler, time_limit), partition_max_s=seconds(scheduler, part.max_time) or 0,
        qos_max_s=seconds(scheduler, qos.max_time if qos else "") or 0,
        gpu_type=part.scheduler_gpu_name or part.gpu_type,  # the scheduler's word, in typed requests
        gpu_request=part.gpu_request, gpu_mem_gb=profile.gpu_mem_gb, mem_per_gpu_gb=profile.mem_per_gpu_gb,
        mem_per_cpu_gb=profile.mem_per_cpu_gb, whole_node=profile.whole_node, node_mem_gb=part.mem_per_node_gb,
        cpu_bind=profile.cpu_bind, hint=profile.hint, qos=profile.qos,
        constraint=scheduler.constraint_join.join(filter(None, (part.constraint, profile.constraint))),
        reservation=profile.reservation, exclusive=profile.exclusive, account=user.get("account"),
        grace_s=profile.grace_s, max_requeues=profile.max_requeues, directives=list(profile.directives),
        hang_timeout_s=fields.duration_s(profile.hang_timeout, f"profile {profile.name!r}: hang_timeout"),
        max_failures=profile.max_failures, spare_nodes=max(part.nodes - profile.nodes, 0),
    )


def seconds(scheduler: Scheduler, text: str) -> Optional[int]:
    """The one place a time limit's text becomes seconds (the scheduler's own format): 0 for none or "", None where
    it is malformed. A profile's and its caps' are parsed as the job is resolved; a record without `time_s` (a run
    made before it was recorded) is parsed by this too."""
    return scheduler.time_seconds(text) if text else 0


def image_of(image: Optional[store.ImageRecord], image_flavor: str, gpus_per_node: int, cluster: Cluster,
             user: Dict[str, Any]) -> ImageRef:
    """The image the job runs (none yet for check-cluster), what it was made from, and who must have signed it."""
    return ImageRef(
        path=image.path if image else "", sha256=image.sha256 if image else "", flavor=image_flavor,
        nv=cluster.nv and gpus_per_node > 0,
        min_driver=min_driver(store.base_flavor(image_flavor)) if gpus_per_node else "",
        registry=image.pushed[0] if image and image.pushed else None,
        signed_from=image.signed_from if image else "", parent_sha256=image.parent_sha256 if image else "",
        signing=policy(cluster.require_signed, cluster.signers, cluster.path, user, str(settings.path())),
    )


def checks_fabric(profile: Profile, part: Partition) -> bool:
    """A multi-node GPU job on a fast fabric: NCCL logs its network choice and the job checks it."""
    return part.fabric in fabric.CHECKS and profile.nodes > 1 and profile.gpus_per_node > 0


def fabric_of(profile: Profile, part: Partition, net: Optional[fabric.Slingshot]) -> Fabric:
    check = checks_fabric(profile, part)
    return Fabric(check=check, name=part.fabric if check else "", paths=net.paths if net else [],
                  library_path=net.library_path if net else "")


def slingshot_of(cluster: Cluster, profile: Profile, part: Partition,
                 user: Dict[str, Any]) -> Optional[fabric.Slingshot]:
    """A multi-node GPU job on HPE Slingshot: the host's NCCL plugin and libfabric it binds
    (cluster_train/host/fabric.py)."""
    if part.fabric != "slingshot" or profile.nodes < 2 or not profile.gpus_per_node:
        return None
    return fabric.slingshot(part, lambda path: settings.expand(path, user, cluster.name), cluster.path,
                            f"profile {profile.name!r} ({profile.nodes} nodes)")


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


def run_config(raw: Dict[str, Any], overrides: Dict[str, Any], profile: Profile, shape: Launch,
               run_dir: Path, user_tracker: Any = None) -> cfg.RunConfig:
    """The run config, resolved once: the experiment, then what the profile sets, then the user's --set (which
    wins; preflight refuses a choice that cannot run), then what the job shape decides (ranks, nodes, paths).
    `user_tracker`: the settings file's `tracker:`, under the experiment's."""
    raw = tracker_layers(raw, user_tracker, profile)
    for key in ("devices", "num_nodes"):
        if key in profile.trainer:
            raise UserError(f"profile {profile.name!r} sets trainer.{key}; it is derived from nodes "
                            "and gpus_per_node, remove it")
    shape_keys = {"trainer.devices": 1 if shape.packed else profile.ranks,
                  "trainer.num_nodes": 1 if shape.packed else profile.nodes, "output_dir": str(run_dir)}
    return absolute_inputs(cfg.resolve(raw, {**profile_values(profile), **overrides, **shape_keys}))


def tracker_layers(raw: Dict[str, Any], user_tracker: Any, profile: Profile) -> Dict[str, Any]:
    """`tracker:` from the user's settings (their usual tracker), then the experiment's, then the profile's (what
    its nodes can reach), each key over the one before; --set goes over all three."""
    merged: Dict[str, Any] = {}
    for where, layer in (("your settings", user_tracker), ("the experiment", raw.get("tracker")),
                         (f"profile {profile.name!r}", profile.tracker or None)):
        layer = tracker_config.normalize(layer) if layer is not None else {}
        if not isinstance(layer, dict):
            raise UserError(f"tracker in {where} is {layer!r}; write a name (mlflow), a list or a mapping")
        merged.update(layer)
    return {**raw, "tracker": merged} if merged else raw


def profile_values(profile: Profile) -> Dict[str, Any]:
    """What a profile sets in the run config, as dotted keys."""
    return {**{f"trainer.{k}": v for k, v in profile.trainer.items()},
            **{f"data.{k}": v for k, v in profile.data.items()}}


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
    if run.data.image and run.command and not run.data.root:  # a command names no place: the documented one
        run.data.root = COMMAND_DATA_MOUNT
    if run.data.image and not Path(run.data.root).is_absolute():  # the image's mount point, as users write it
        run.data.root = str(project.ROOT / run.data.root)
    return run
