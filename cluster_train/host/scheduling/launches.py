"""Launch shapes: how a job's processes are started, one table every place asks (clusters/ validates a profile's
`launch:` against it, jobs/ derives tasks per node and packed tasks from it, preflight checks a scheduler can start
it, the templates branch on it). An adapter lists the names of the shapes it can start (`Scheduler.launches`)."""
from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class Launch:
    name: str  # the profile's `launch:` word
    what: str  # one line for people
    task_per_rank: bool  # one scheduler task per rank (--ntasks-per-node = ranks); else one process per host
    multi_host: bool  # can start the ranks of one training on several hosts
    packed: bool = False  # independent trainings, one task each, packed into one job
    lightning_starts_ranks: bool = False  # the one process per host is Lightning, which starts the host's ranks
    shell_watches_ranks: bool = False  # the batch shell starts each rank itself, and ends the rest when one fails
    # a node's tasks start from one parent (srun's step daemon), so apptainer --sharens can run them in one container
    one_parent_per_node: bool = False


LAUNCHES: Dict[str, Launch] = {shape.name: shape for shape in (
    Launch("srun", "per-GPU ranks, one srun task each, on every node", task_per_rank=True, multi_host=True,
           one_parent_per_node=True),
    Launch("lightning", "one process per host, Lightning starts its ranks", task_per_rank=False, multi_host=False,
           lightning_starts_ranks=True),
    Launch("blaunch", "per-GPU ranks, one blaunch task each, on every host", task_per_rank=True, multi_host=True,
           shell_watches_ranks=True),  # srun ends the others with --kill-on-bad-exit; blaunch does not
    Launch("independent", "independent trainings packed into one job, one task each", task_per_rank=False,
           multi_host=False, packed=True),
)}
