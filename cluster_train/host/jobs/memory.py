"""A job's memory: how the profile asks for it (per node, per GPU, per CPU, all of each node's with `whole_node`, or
not at all, which leaves it to the site's default), what the job then gets per node (`ResolvedJob.mem_gb`: a number where
one is known, None where not; nothing here makes one up), and preflight's checks of it against the node and
against what the ranks and their dataloader workers need (by the figures cluster_train/host/jobs/measured.py chooses:
measured where a run or a probe measured them, else as stated); the summary's line about it."""
import math
from typing import Optional

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host.clusters import Cluster, Partition, Profile
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.jobs.measured import HostRam, gb


def node_memory_gb(profile: Profile, part: Partition, tasks_per_node: int) -> Optional[int]:
    """Memory per node, however the profile gives it; a whole node's is the partition's mem_per_node_gb (None where
    the cluster file does not state it); None where the profile asks for none (the site's default)."""
    if profile.whole_node:
        return part.mem_per_node_gb
    if profile.mem_per_gpu_gb is not None:
        return profile.mem_per_gpu_gb * profile.gpus_per_node
    if profile.mem_per_cpu_gb is not None:
        return profile.mem_per_cpu_gb * profile.cpus_per_task * tasks_per_node
    return profile.mem_gb


def memory_key(job: ResolvedJob) -> str:
    """The profile key the job's memory came from, for the fix a message names."""
    place = job.placement
    if place.whole_node:
        return "whole_node"
    return "mem_per_gpu_gb" if place.mem_per_gpu_gb else "mem_per_cpu_gb" if place.mem_per_cpu_gb else "mem_gb"


def memory_fits_node(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    place = job.placement
    if place.whole_node or place.mem_gb is None or place.node_mem_gb is None or place.mem_gb <= place.node_mem_gb:
        return
    raise UserError(f"profile {job.profile!r} on {place.partition!r} asks for {place.mem_gb} GB per node but a node "
                    f"has {place.node_mem_gb} GB; lower {memory_key(job)}")


def packed_tasks_share_memory(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """Packed tasks each ask srun for their share of the job's memory (else each step takes all of it and they run
    one after another): the share needs the job's memory as a number the site grants exactly."""
    place = job.placement
    if not job.work.tasks or (place.mem_gb is not None and not place.whole_node):
        return
    given = "whole_node, whose exact size only the scheduler knows" if place.whole_node else "no memory"
    raise UserError(f"profile {job.profile!r} packs {len(job.work.tasks)} tasks, each given its share of the job's "
                    f"memory, but asks for {given}; set mem_gb (per node) or mem_per_gpu_gb")


def processes_per_node(job: ResolvedJob) -> int:
    return job.placement.tasks_per_node if job.work.tasks else job.work.ranks_per_node


def host_ram_gb(job: ResolvedJob, run: cfg.RunConfig, ram: HostRam) -> float:
    """What the ranks and their dataloader workers take of one node's memory, by the figures preflight uses."""
    return processes_per_node(job) * (ram.rank.gb + run.data.num_workers * ram.worker.gb)


def host_ram_fits(job: ResolvedJob, run: cfg.RunConfig, ram: HostRam) -> None:
    """Each rank on a node runs its main process plus num_workers dataloader workers, all in host RAM: checked
    against the job's memory, or, with no request, the node's (the site's default gives no more)."""
    place = job.placement
    data, ranks, need = run.data, processes_per_node(job), host_ram_gb(job, run, ram)
    have = place.mem_gb if place.mem_gb is not None else place.node_mem_gb
    if have is None or need <= have:
        return  # nothing known to check against: the summary says so
    requested = place.mem_gb is not None and not place.whole_node
    node = f" (the node has {place.node_mem_gb} GB)" if place.node_mem_gb else ""
    fix = f"raise {memory_key(job)}{node}" if requested else "choose a partition with more memory per node"
    spare = have / ranks - ram.rank.gb
    if spare >= 0 and ram.worker.gb > 0:
        fix = f"set data.num_workers={math.floor(spare / ram.worker.gb)} or fewer, or {fix}"
    holder = ("the job has" if requested else "a whole node has" if place.whole_node
              else "a node (the site's default at most) has")
    raise UserError(
        f"host RAM: {ranks} rank(s) per node x ({gb(ram.rank.gb)} GB + {data.num_workers} dataloader workers x "
        f"{gb(ram.worker.gb)} GB) needs {gb(need)} GB per node but {holder} {have} GB; {fix}; {figures(run, ram)}"
    )


def figures(run: cfg.RunConfig, ram: HostRam) -> str:
    """Where the figures came from (the worker's only where the run has workers)."""
    return ram.rank.said + (f", {ram.worker.said}" if run.data.num_workers else "")


def summary_line(job: ResolvedJob, run: cfg.RunConfig, ram: HostRam) -> str:
    """The summary's line: the estimate against what the job gets, or what it leaves to the site; its figures."""
    place = job.placement
    estimate = f"host RAM: about {gb(host_ram_gb(job, run, ram))} GB per node"
    node = f"a node has {place.node_mem_gb} GB" if place.node_mem_gb else "the cluster file states no mem_per_node_gb"
    if place.whole_node:
        line = f"{estimate} of a whole node's memory (whole_node: {node})"
    elif place.mem_gb is None:
        line = f"{estimate}; memory is the site's default (no memory request; {node})"
    else:
        line = f"{estimate} of {place.mem_gb} GB requested"
    return f"{line}; {figures(run, ram)}"
