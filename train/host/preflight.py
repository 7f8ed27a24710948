"""Checks run on every submission and on --dry-run: refuse, with the cause and the fix, any job that would
hang, run N silent copies, be rejected by the scheduler, or run the wrong image. Nothing is queued before these pass."""
import re
from pathlib import Path
from typing import Callable, List

from train import config as cfg
from train.errors import UserError
from train.host.clusters import SAFE_NAME, Cluster
from train.host.job import Job

SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$|^\d+$")
LSF_TIME = re.compile(r"^(\d+:)?\d+$")


def check(job: Job, cluster: Cluster, run: cfg.RunConfig) -> None:
    for rule in RULES:
        rule(job, cluster, run)


def fits_partition(job: Job, cluster: Cluster, run: cfg.RunConfig) -> None:
    part = cluster.partition(job.partition)
    where = f"profile {job.profile!r} on {job.partition!r}"
    if job.nodes > part.nodes:
        raise UserError(f"{where} asks for {job.nodes} nodes but the partition has {part.nodes}; lower nodes")
    if job.gpus_per_node > part.gpus_per_node:
        raise UserError(
            f"{where} asks for {job.gpus_per_node} GPUs per node but a node has {part.gpus_per_node}; "
            f"lower gpus_per_node or add nodes"
        )
    if job.mem_gb > part.mem_per_node_gb:
        raise UserError(f"{where} asks for {job.mem_gb} GB per node but a node has {part.mem_per_node_gb} GB; lower mem_gb")
    if job.cpus_per_task * job.tasks_per_node > part.cpus_per_node:
        raise UserError(
            f"{where} asks for {job.tasks_per_node} task(s) x {job.cpus_per_task} CPUs per node but a node has "
            f"{part.cpus_per_node}; lower cpus_per_task"
        )


def one_rank_per_gpu(job: Job, cluster: Cluster, run: cfg.RunConfig) -> None:
    if job.gpus_per_node and job.ranks_per_node != job.gpus_per_node:
        raise UserError(
            f"profile {job.profile!r} starts {job.ranks_per_node} rank(s) per node on {job.gpus_per_node} GPU(s); "
            f"set ranks_per_node to {job.gpus_per_node} (one rank per GPU) or drop it"
        )


def launcher_starts_every_rank(job: Job, cluster: Cluster, run: cfg.RunConfig) -> None:
    if job.scheduler == "local" and job.nodes > 1:
        raise UserError(f"profile {job.profile!r}: the local cluster has one node, not {job.nodes}; set nodes: 1")
    if job.total_ranks > 1 and job.scheduler == "slurm" and job.launch != "srun":
        raise UserError(
            f"profile {job.profile!r} launches {job.total_ranks} ranks under Slurm without srun: only rank 0 would "
            f"join and the job would hang; set launch: srun"
        )
    if job.nodes > 1 and job.launch == "lightning":
        raise UserError(
            f"profile {job.profile!r}: Lightning can start workers on one host only, not {job.nodes}; "
            f"set launch: {'blaunch' if job.scheduler == 'lsf' else 'srun'}"
        )


def time_limit_is_valid(job: Job, cluster: Cluster, run: cfg.RunConfig) -> None:
    pattern, example = (LSF_TIME, "4:00") if job.scheduler == "lsf" else (SLURM_TIME, "04:00:00 or 1-12:00:00")
    if not pattern.match(job.time):
        raise UserError(f"profile {job.profile!r}: time limit {job.time!r} is malformed; write it like {example}")


def names_are_safe(job: Job, cluster: Cluster, run: cfg.RunConfig) -> None:
    # Directive lines are read by the scheduler, not a shell, so they cannot be quoted: refuse what needs quoting.
    for what, value in (("partition", job.partition), ("job name", job.job_name), ("account", job.account)):
        if value is not None and not SAFE_NAME.match(value):
            raise UserError(f"{what} {value!r} has characters a scheduler directive cannot carry; use letters, digits, '_.-+'")


def image_exists(job: Job, cluster: Cluster, run: cfg.RunConfig) -> None:
    part = cluster.partition(job.partition)
    if job.image_flavor != part.image:
        raise UserError(
            f"image flavor {job.image_flavor!r} cannot run on {job.partition!r} ({part.gpu_type}), which needs "
            f"{part.image!r}; build it with: make image FLAVOR={part.image}"
        )
    if not job.image or not Path(job.image).is_file():
        raise UserError(f"no {job.image_flavor} image has been built; build it with: make image FLAVOR={job.image_flavor}")


RULES: List[Callable] = [
    fits_partition,
    one_rank_per_gpu,
    launcher_starts_every_rank,
    time_limit_is_valid,
    names_are_safe,
    image_exists,
]


def summary(job: Job, run: cfg.RunConfig) -> str:
    """What a user needs to know before queuing."""
    per_rank = run.data.batch_size
    effective = per_rank * job.total_ranks * run.trainer.accumulate_grad_batches
    gpus = job.nodes * job.gpus_per_node
    return "\n".join(
        [
            f"cluster {job.cluster} ({job.scheduler}), profile {job.profile}, partition {job.partition}",
            f"shape: {job.nodes} node(s) x {job.ranks_per_node} rank(s) = {job.total_ranks} rank(s), "
            f"{gpus} GPU(s), launch {job.launch}, time {job.time}",
            f"batch: {per_rank} per rank x {job.total_ranks} rank(s) x {run.trainer.accumulate_grad_batches} "
            f"accumulation = {effective} effective",
            f"image: {job.image} ({job.image_flavor}) sha256 {job.image_sha256}",
            f"run dir: {job.run_dir}",
        ]
    )
