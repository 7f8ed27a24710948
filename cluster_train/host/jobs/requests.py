"""What a profile asks of the scheduler in the site's own words, checked before anything is rendered or queued: the
time limit (in seconds, as jobs/resolve.py parsed it once with the scheduler's own parser, within the partition's
and the QOS's `max_time` and after the time-limit warning `grace_s`), the CPU binding (`cpu_bind`), and the GPU
name a typed request puts in the script (the partition's `scheduler_gpu_name`, not a name containers/flavors.yaml
knows the model by)."""
from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host.clusters import Cluster
from cluster_train.host.clusters.flavors import gpu_model
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.schedulers import Scheduler

REPORT_ONLY = ("q", "quiet", "v", "verbose")  # --cpu-bind words that bind nothing: they go with --hint


def time_limit_is_valid(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """The limit as resolve parsed it once (`time_s`), within the partition's and the QOS's (`*_max_s`)."""
    place = job.placement
    scheduler, seconds = job.adapter, place.time_s
    where = f"profile {job.profile!r}"
    if seconds is None:
        raise UserError(f"{where}: time limit {place.time!r} is malformed; write it like {scheduler.time_example}")
    if seconds == 0:
        raise UserError(f"{where}: time {place.time!r} sets no time limit, yet the time-limit warning (grace_s: "
                        f"{place.grace_s}) needs one to come before; give a limit like {scheduler.time_example}")
    if place.partition_max_s and seconds > place.partition_max_s:
        word, most = scheduler.partition_word, cluster.partition(place.partition).max_time
        raise UserError(f"{where}: time {place.time!r} is longer than the max_time {most!r} of {word} "
                        f"{place.partition!r}; lower time to {most} or less, or choose a {word} that "
                        f"allows it")
    if place.qos_max_s and seconds > place.qos_max_s:
        most = cluster.qos[place.qos].max_time
        raise UserError(f"{where}: time {place.time!r} is longer than the max_time {most!r} of qos "
                        f"{place.qos!r} "
                        f"({cluster.path}); lower time to {most} or less, or choose a qos that allows it")
    warning_comes_before_the_limit(job, scheduler, seconds)


def warning_comes_before_the_limit(job: ResolvedJob, scheduler: Scheduler, seconds: int) -> None:
    """A warning at or before the job's start would have it save and requeue itself until max_requeues is spent."""
    place = job.placement
    where = f"profile {job.profile!r}"
    if scheduler.max_warning_s is not None and place.grace_s > scheduler.max_warning_s:
        raise UserError(f"{where}: grace_s: {place.grace_s} is longer than {job.scheduler} can warn ahead "
                        f"({scheduler.max_warning_s} s); lower grace_s")
    warning = scheduler.warning_seconds(place.grace_s)
    if warning >= seconds:
        rounded = f", {warning} s as {job.scheduler} gives it in whole minutes" if warning != place.grace_s else ""
        raise UserError(f"{where}: grace_s: {place.grace_s} (the time-limit warning{rounded}) is not shorter than the "
                        f"time limit {place.time!r} ({seconds} s): the job would be warned at its start and requeue "
                        f"itself until max_requeues is spent; lower grace_s below {seconds} or raise time")


def cpu_bind_is_valid(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """A binding the scheduler's launcher understands (one that cannot bind at all refuses the key through its
    `unsupported`), and not beside --hint, which srun takes instead of a binding."""
    place = job.placement
    scheduler = job.adapter
    if not place.cpu_bind or ("cpu_bind", "") in scheduler.unsupported:
        return
    problem = scheduler.cpu_bind_problem(place.cpu_bind)
    if problem:
        raise UserError(f"profile {job.profile!r}: {problem}")
    if place.hint and place.cpu_bind not in REPORT_ONLY:
        raise UserError(f"profile {job.profile!r} sets hint: {place.hint} and cpu_bind: {place.cpu_bind}; srun takes "
                        f"--hint or a --cpu-bind binding, not both: keep one of them")


def typed_request_names_the_schedulers_gpu(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """A typed request (a100:4, gmodel=) names the GPU in the scheduler's word: scheduler_gpu_name, or gpu_type where
    it is a model's own name. A marketing name (A100-SXM4-40GB) is how the flavors file knows the model, and a
    scheduler would reject it as a GPU type it has never heard of."""
    place = job.placement
    part = cluster.partition(place.partition)
    where = f"partition {place.partition!r}"
    typed = place.gpu_request.startswith("typed")
    if part.scheduler_gpu_name and not typed:
        raise UserError(f"{where} sets scheduler_gpu_name: {part.scheduler_gpu_name} but gpu_request: "
                        f"{place.gpu_request} names no GPU type; set gpu_request: typed, or remove scheduler_gpu_name")
    if not typed or part.scheduler_gpu_name:
        return
    model, capability = gpu_model(part.gpu_type)
    if capability == "none":
        raise UserError(f"{where} has gpu_request: {place.gpu_request} but no gpu_type to name; set gpu_type to the "
                        f"GPU model and scheduler_gpu_name to the scheduler's name of it (e.g. a100)")
    if model.lower() != part.gpu_type.lower():
        raise UserError(f"{where}: gpu_request: {place.gpu_request} would ask {job.scheduler} for gpu_type "
                        f"{part.gpu_type!r}, a name of the {model} in containers/flavors.yaml, not the scheduler's; "
                        f"set scheduler_gpu_name: to the GPU type the site's scheduler lists (sinfo -o %G, "
                        f"lshosts -gpu) and gpu_type: {model}")
