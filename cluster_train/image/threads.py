"""Each rank computes on its share of the CPUs the scheduler gave its task, not on every core of the node.

PyTorch sizes its intra-op pool (OpenMP, MKL) by the cores it sees; where a node has no CPU cgroup, four 1-CPU ranks
then run four threads each and slow each other down. Lightning divides the visible cores by the local ranks, which is
just as blind to the allocation. Here the share comes from the scheduler's own variables (Slurm's
SLURM_CPUS_PER_TASK, LSF's slots on this host in LSB_MCPU_HOSTS; the job script's CT_CPUS_PER_TASK where there is no
scheduler), divided by the ranks the task starts itself. Dataloader workers are not counted: PyTorch runs each worker
on one thread. A value the user set (OMP_NUM_THREADS in the cluster file's or profile's env) is kept.
Imports no torch: it must run before torch is imported, which reads these variables once.
"""
import os
import socket
from typing import Mapping, MutableMapping, Optional

from cluster_train.image.launch_env import starts_ranks_itself

VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def lsf_host_slots(environ: Mapping[str, str]) -> Optional[int]:
    """This host's slots in LSB_MCPU_HOSTS ("hostA 4 hostB 4"), or None outside LSF."""
    words = environ.get("LSB_MCPU_HOSTS", "").split()
    slots = {host.split(".")[0]: int(n) for host, n in zip(words[::2], words[1::2]) if n.isdigit()}
    return slots.get(socket.gethostname().split(".")[0]) if slots else None


def rank_share(environ: Mapping[str, str]) -> Optional[int]:
    """Threads per rank: the CPUs the scheduler gave over the ranks sharing them, at least one; None where nothing
    says. Slurm's and ours count per task (shared by the ranks a task starts); LSF's slots count per host."""
    per_node = int(environ.get("CT_RANKS_PER_NODE", "1"))
    per_task = per_node if starts_ranks_itself(environ) else 1
    lsf_slots = lsf_host_slots(environ)
    if environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        cpus, sharing = int(environ["SLURM_CPUS_PER_TASK"]), per_task
    elif lsf_slots is not None:
        cpus, sharing = lsf_slots, per_node
    elif environ.get("CT_CPUS_PER_TASK", "").isdigit():
        cpus, sharing = int(environ["CT_CPUS_PER_TASK"]), per_task
    else:
        return None
    return max(1, cpus // max(1, sharing))


def default_threads(environ: MutableMapping[str, str] = os.environ) -> Optional[int]:
    """Set OMP_NUM_THREADS and MKL_NUM_THREADS to this rank's share unless the user set OMP_NUM_THREADS; the count
    in force (None: nothing says, PyTorch's own default stands)."""
    if environ.get("OMP_NUM_THREADS"):
        return int(environ["OMP_NUM_THREADS"]) if environ["OMP_NUM_THREADS"].isdigit() else None
    share = rank_share(environ)
    if share is not None:
        for name in VARIABLES:
            environ.setdefault(name, str(share))
    return share
