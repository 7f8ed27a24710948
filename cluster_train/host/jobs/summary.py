"""The summary a user reads before a job is queued (and on a dry run): where, what shape, the most it costs, the
effective batch, host RAM against the request (or the site's default), the image, the run directory, and each --set
that replaced a profile's value, and whether the command is known to resume after its time limit."""
from typing import Any, Dict, Optional

from cluster_train.shared import config as cfg
from cluster_train.host.jobs import memory
from cluster_train.host.jobs import resumes
from cluster_train.host.jobs.code_snapshot import Snapshot
from cluster_train.host.jobs.cost import most_cost_line
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.jobs.measured import HostRam


def summary(job: ResolvedJob, run: cfg.RunConfig, overridden: Dict[str, Any], host_ram: HostRam,
            batch_known: bool = True, snapshot: Optional[Snapshot] = None) -> str:
    """What a user needs to know before queuing; `host_ram`: the figures preflight budgeted, and where from;
    `snapshot`: the code a command runs (read for the requeue contract)."""
    place = job.placement
    per_rank = run.data.batch_size
    effective = per_rank * job.total_ranks * run.trainer.accumulate_grad_batches
    gpus = place.nodes * place.gpus_per_node
    batch = (f"batch: {per_rank} per rank x {job.total_ranks} rank(s) x {run.trainer.accumulate_grad_batches} "
             f"accumulation = {effective} effective" if batch_known else
             "batch: not known to cluster-train (name your batch size key in reads: to see the effective one)")
    return "\n".join(
        [
            f"cluster {job.cluster} ({job.scheduler}), profile {job.profile}, partition {place.partition}{_named(job)}",
            f"shape: {place.nodes} node(s) x {job.work.ranks_per_node} rank(s) = {job.total_ranks} rank(s), "
            f"{gpus} GPU(s), launch {job.work.launch}, time {place.time}",
            most_cost_line(job),
            *filter(None, [resumes.summary_line(job, bool(job.adapter.requeue_command), snapshot)]),
            batch,
            memory.summary_line(job, run, host_ram),
            f"image: {job.image.path} ({job.image.flavor}) sha256 {job.image.sha256}",
            f"run dir: {job.work.run_dir}",
        ]
        + [f"{key}: your --set replaces the profile's {value!r}" for key, value in overridden.items()]
    )


def _named(job: ResolvedJob) -> str:
    """How the script names the partition, where that is not the entry's own name."""
    place = job.placement
    if place.queue == place.partition:
        return ""
    return f" (named {place.queue} in the script)" if place.queue else " (the script names none: the default one)"
