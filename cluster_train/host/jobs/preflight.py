"""Checks run on every submission and on --dry-run: refuse, with the cause and the fix, any job that would
hang, run N silent copies, be rejected by the scheduler, or run the wrong image. Nothing is queued before these pass.
The rules about memory are in jobs/memory.py; time limits, CPU binding and typed GPU names in jobs/requests.py."""
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import project
from cluster_train.host.clusters import Cluster, fields
from cluster_train.host.clusters.flavors import driver_version, flavor_table, gpu_model, known_flavor, make_image
from cluster_train.host.images import signing
from cluster_train.host.images.store import base_flavor
from cluster_train.host.jobs import config_check, data_files, memory, reads, requests, standalone
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.jobs.measured import HostRam
from cluster_train.host.scheduling.facts import SAFE_NAME
from cluster_train.host.scheduling.launches import LAUNCHES


def check(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig, task_runs: List[cfg.RunConfig],
          user_set: Dict[str, Any], host_ram: HostRam, dry_run: bool = False,
          user_config: Optional[reads.UserConfig] = None, awaited: Sequence[Path] = ()) -> List[str]:
    """Run every check and raise all failures at once (one line each). An image not built yet on this machine, and
    data not there yet, are warnings instead on a dry run: the job can be reviewed before they exist.
    `host_ram`: the figures per rank and per worker (cluster_train/host/jobs/measured.py) the host RAM check budgets.
    `user_config`: what a command's own config says (reads:), checked against the job and named in its terms.
    `awaited`: the directories of runs the job waits on: an input inside one exists by the time it starts."""
    errors = failures(RULES, job, cluster, run)
    errors += failures([lambda *_: memory.host_ram_fits(job, run, host_ram)], job, cluster, run)
    for task, task_run in zip(job.work.tasks, task_runs):
        errors += [UserError(f"{task.name}: {err}") for err in config_check.problems(task_run, awaited)]
    if not job.work.tasks:
        errors += config_check.problems(run, awaited)
    errors += config_check.user_choices(job, user_set, cluster.profile(job.profile))
    errors += directives_repeated(job)
    errors = reads.in_user_terms(errors, user_config)  # then the checks that speak of your config themselves
    errors += reads.shape_problems(user_config, job.profile, job.work.ranks_per_node, job.placement.nodes)
    errors += reads.set_over(user_config, user_set)
    missing = image_missing(job)
    if missing and not (dry_run and not errors):
        errors.append(missing)
    no_data = data_files.problems(task_runs or [run])
    errors += [] if dry_run else no_data
    unsigned = not missing and job.image.signing.required and signing.problem(  # apptainer verify, only where asked for
        job.image.path, job.image.sha256, job.image.flavor, job.image.signing)
    if unsigned:
        errors.append(UserError(unsigned))
    raise_all(list({str(err): err for err in errors}.values()))  # one rule's failure may show in another
    return [f"warning: {problem}" for problem in ([missing] if missing else []) + no_data]


def failures(rules: List[Callable], job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> List[UserError]:
    errors = []
    for rule in rules:
        try:
            rule(job, cluster, run)
        except UserError as err:
            errors.append(err)
    return errors


def fits_partition(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    place = job.placement
    part = cluster.partition(place.partition)
    where = f"profile {job.profile!r} on {place.partition!r}"
    if place.nodes > part.nodes:
        raise UserError(f"{where} asks for {place.nodes} nodes but the partition has {part.nodes}; lower nodes")
    if place.gpus_per_node > part.gpus_per_node:
        raise UserError(
            f"{where} asks for {place.gpus_per_node} GPUs per node but a node has {part.gpus_per_node}; "
            f"lower gpus_per_node or add nodes"
        )
    cpus, unit = _node_cpus(job, part)
    if place.cpus_per_task * place.tasks_per_node > cpus:
        raise UserError(
            f"{where} asks for {place.tasks_per_node} task(s) x {place.cpus_per_task} CPUs per node but a node has "
            f"{cpus} {unit}; lower cpus_per_task"
        )


def _node_cpus(job: ResolvedJob, part) -> Tuple[int, str]:
    """What a node offers cpus_per_task: its hardware threads (Slurm's CPUs), or its cores under nomultithread."""
    if part.threads_per_core > 1 and job.placement.hint != "nomultithread":
        return part.cpus_per_node * part.threads_per_core, f"hardware threads ({part.cpus_per_node} cores)"
    return part.cpus_per_node, "cores" if part.threads_per_core > 1 else "CPUs"


def gpus_as_asked(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """What the profile asks of each GPU is something the partition's GPUs and the scheduler can give."""
    place = job.placement
    part = cluster.partition(place.partition)
    where = f"profile {job.profile!r} on {place.partition!r}"
    if place.gpu_mem_gb and place.gpu_mem_gb > part.gpu_mem_gb:
        have = f"{part.gpu_mem_gb} GB GPUs" if part.gpu_mem_gb else "GPUs of unstated memory (gpu_mem_gb)"
        raise UserError(f"{where} needs GPUs with {place.gpu_mem_gb} GB but the partition has {have}; choose a "
                        f"partition whose GPUs have it, or lower gpu_mem_gb")


def scheduler_can_express(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    for (key, value), fix in job.adapter.unsupported.items():
        have = getattr(job.placement, key)
        if have and (not value or have == value):
            shown = str(have).lower() if isinstance(have, bool) else have  # as the cluster file writes it
            raise UserError(f"profile {job.profile!r}: {key}: {shown} cannot be asked of {job.scheduler}; {fix}")


def one_rank_per_gpu(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    gpus, tasks, ranks = job.placement.gpus_per_node, job.work.tasks, job.work.ranks_per_node
    if tasks:
        if len(tasks) != gpus:
            raise UserError(
                f"profile {job.profile!r} packs {len(tasks)} independent task(s) on {gpus} GPU(s); "
                f"list one task per GPU or set gpus_per_node: {len(tasks)}"
            )
        return
    if gpus and ranks != gpus:
        raise UserError(
            f"profile {job.profile!r} starts {ranks} rank(s) per node on {gpus} GPU(s); "
            f"set ranks_per_node to {gpus} (one rank per GPU) or drop it"
        )


def launcher_starts_every_rank(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    place = job.placement
    scheduler, shape = job.adapter, job.work.shape
    where = f"profile {job.profile!r}"
    if shape.name not in scheduler.launches:
        if shape.packed:
            raise UserError(f"{where}: launch: {shape.name} packs tasks with one srun step each, which {job.scheduler} "
                            f"lacks; submit one job per task instead")
        raise UserError(f"{where}: launch: {shape.name} is not a launch {job.scheduler} can start; use one of: "
                        f"{', '.join(scheduler.launches)}")
    if job.total_ranks > 1 and shape.lightning_starts_ranks and \
            not LAUNCHES[scheduler.default_launch].lightning_starts_ranks:
        raise UserError(f"{where} launches {job.total_ranks} ranks under {job.scheduler} without "
                        f"{scheduler.default_launch}: only rank 0 would join and the job would hang; "
                        f"set launch: {scheduler.default_launch}")
    multi_host = [name for name in scheduler.launches if LAUNCHES[name].multi_host]
    if place.nodes > 1 and not shape.multi_host:
        if not multi_host:
            raise UserError(f"{where}: the {cluster.name} cluster has one node, not {place.nodes}; set nodes: 1")
        raise UserError(f"{where}: {shape.name} can start workers on one host only, not {place.nodes}; "
                        f"set launch: {multi_host[0]}")
    if shape.packed and not job.work.tasks:
        raise UserError(f"{where} has launch: {shape.name} but no tasks; list them under tasks:")


def names_are_safe(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    # Directive lines are read by the scheduler, not a shell, so they cannot be quoted: refuse what needs quoting.
    # The cluster file's names (partition, qos, reservation, GPU name) were refused as it was read, naming it.
    for what, value in (("job name", job.job_name), ("account", job.placement.account)):
        if value is not None and not SAFE_NAME.match(value):
            raise UserError(f"{what} {value!r} has characters a scheduler directive cannot carry; "
                            "use letters, digits, '_.-+'")
    run_dir = job.work.run_dir
    if job.adapter.directive_prefix and fields.UNCARRIED.search(run_dir):
        raise UserError(f"run dir {run_dir!r} has characters a scheduler directive (its log path) cannot carry; "
                        f"choose a runs root of letters, digits and '_./+@,=~-' (runs: in your settings or "
                        f"{cluster.path}, or CT_RUNS_DIR)")


def image_can_drive_the_gpus(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    place = job.placement
    part = cluster.partition(place.partition)
    table = flavor_table()
    known_flavor(job.image.flavor)  # a derived image (cpu+myproject) has its base's CUDA
    try:
        model, capability = gpu_model(part.gpu_type)
    except UserError as error:
        raise UserError(f"partition {place.partition!r}: {error}") from None
    if capability == "none" or place.gpus_per_node == 0:
        return  # CPU partitions and fake test GPUs: nothing for CUDA to drive
    flavor = table["flavors"][base_flavor(job.image.flavor)]
    if "min_capability" not in flavor or not flavor["min_capability"] <= capability <= flavor["max_capability"]:
        raise UserError(
            f"image flavor {job.image.flavor!r} cannot drive {model} GPUs (compute capability {capability}) "
            f"on {place.partition!r}; use the {part.image} image: {make_image(part.image)}"
        )


def driver_runs_the_image(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """A partition's stated driver runs the image's CUDA (the job checks the node's own driver again at start)."""
    partition, needed = job.placement.partition, job.image.min_driver
    driver = cluster.partition(partition).driver
    if driver and needed and driver_version(driver) < driver_version(needed):
        cuda = flavor_table()["flavors"][base_flavor(job.image.flavor)]["cuda"]
        raise UserError(f"partition {partition!r} runs NVIDIA driver {driver}, older than the {needed} "
                        f"that the {job.image.flavor} image (CUDA {cuda}) needs; choose a partition with a newer "
                        f"driver or an image of an older CUDA")


BF16_CAPABILITY = 8.0  # Ampere and newer (cluster_train/image/speed.py decides `auto` by the same line in the job)


def gpu_has_bf16(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """An explicit bf16-mixed on a partition whose GPUs lack bf16 (V100) would fail at the job's start."""
    place = job.placement
    part = cluster.partition(place.partition)
    model, capability = gpu_model(part.gpu_type)
    if run.trainer.precision == "bf16-mixed" and isinstance(capability, float) and capability < BF16_CAPABILITY:
        raise UserError(f"trainer.precision=bf16-mixed but partition {place.partition!r} has {model} GPUs (compute "
                        f"capability {capability}), which have no bf16; set trainer.precision=16-mixed, 32 or auto")


def graphs_have_a_gpu(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """trainer.cuda_graphs=always would end the job at its start where no CUDA GPU runs the step."""
    place, flavor = job.placement, base_flavor(job.image.flavor)
    if run.trainer.cuda_graphs == "always" and (place.gpus_per_node == 0 or flavor == "cpu"):
        raise UserError(f"trainer.cuda_graphs=always but {place.partition!r} runs the job without a CUDA GPU "
                        f"({place.gpus_per_node} GPUs per node, the {flavor} image); set trainer.cuda_graphs=auto, "
                        f"or choose a GPU partition and a CUDA image")


def workers_have_cpus(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    place, ranks = job.placement, job.work.ranks_per_node
    cpus = place.cpus_per_task if place.tasks_per_node >= ranks else place.cpus_per_task // ranks
    if run.data.num_workers > cpus:
        raise UserError(
            f"data.num_workers={run.data.num_workers} dataloader workers per rank but each rank has {cpus} CPU(s); "
            f"set data.num_workers={cpus} or fewer, or raise cpus_per_task"
        )


TRACKER_CLIENTS = {"mlflow": "mlflow-skinny", "wandb": "wandb"}  # the package each tracker imports, as a lock names it


def image_has_the_trackers(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """A tracker whose client the image does not install would fail in the job, after the wait in the queue."""
    lock = project.ROOT / "containers" / f"{base_flavor(job.image.flavor)}.lock"
    if job.image.parent_sha256 or not lock.is_file():  # a derived image may add it
        return
    pinned = {line.split("==")[0].lower() for line in lock.read_text().splitlines() if line[:1].isalnum()}
    missing = [name for name in run.tracker.use if name in TRACKER_CLIENTS and TRACKER_CLIENTS[name] not in pinned]
    if missing:
        packages = " ".join(TRACKER_CLIENTS[name] for name in missing)
        raise UserError(f"tracker {', '.join(missing)}: the {job.image.flavor} image does not carry {packages} yet; "
                        f"derive one that does (bin/run-cluster images derive NAME --from {job.image.flavor} "
                        f"--requirements FILE.lock) or leave it out of tracker.use")


def directives_repeated(job: ResolvedJob) -> List[UserError]:
    """A raw directive that sets what the script already sets from a key: the scheduler would take one of the two
    (which one depends on the scheduler), so the key would silently not hold. The script's own options are the
    adapter's names for what the typed job sets (owned_options); only the raw directives, the profile's free text,
    are read, as the scheduler would read them."""
    place = job.placement
    scheduler = job.adapter
    if not place.directives or not scheduler.directive_prefix:
        return []
    raw = [scheduler.option(directive) for directive in place.directives]
    given = Counter(scheduler.owned_options(job)) + Counter(raw)  # a raw one given twice is a repeat too
    errors = []
    for directive, option in zip(place.directives, raw):
        if given[option] > 1 and option not in scheduler.repeatable:
            key = scheduler.option_keys.get(option, "the profile's own key")
            errors.append(UserError(f"profile {job.profile!r}: directive {directive!r} repeats {option}, which the "
                                    f"script already sets; remove it from directives and set {key} instead"))
    return errors


def image_missing(job: ResolvedJob) -> Optional[UserError]:
    if not job.image.path or not Path(job.image.path).is_file():
        base, _, name = known_flavor(job.image.flavor).partition("+")
        build = (f"bin/run-cluster images derive {name} --from {base} --requirements requirements.lock" if name
                 else make_image(base))
        return UserError(f"no {job.image.flavor} image has been built here; build it with: {build}")
    return None


# What a profile asks of its cluster (check-cluster runs these for every profile), then what a run asks of it.
CLUSTER_RULES: List[Callable] = [
    fits_partition,
    memory.memory_fits_node,
    memory.packed_tasks_share_memory,
    gpus_as_asked,
    requests.typed_request_names_the_schedulers_gpu,
    scheduler_can_express,
    one_rank_per_gpu,
    launcher_starts_every_rank,
    requests.time_limit_is_valid,
    requests.cpu_bind_is_valid,
    names_are_safe,
    image_can_drive_the_gpus,
    driver_runs_the_image,
]
# then host RAM, by the figures check() gets
RULES: List[Callable] = CLUSTER_RULES + [gpu_has_bf16, graphs_have_a_gpu, workers_have_cpus, image_has_the_trackers,
                                         standalone.one_rank]
