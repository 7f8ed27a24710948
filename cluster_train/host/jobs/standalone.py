"""`standalone: true` (run-cluster --standalone, as torchrun's): a one-rank command run as `python train.py` runs,
without RANK, WORLD_SIZE, LOCAL_RANK, ... (cluster_train/image/command.py). Refused where it cannot mean that."""
from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host.clusters import Cluster
from cluster_train.host.scheduling.job import ResolvedJob


def one_rank(job: ResolvedJob, cluster: Cluster, run: cfg.RunConfig) -> None:
    """A preflight rule (cluster_train/host/jobs/preflight.py RULES)."""
    if not run.standalone:
        return
    if not run.command:
        raise UserError("--standalone (standalone: true) runs your own command without the launcher's variables; "
                        "a registered task always has them: drop --standalone, or name a command after --")
    if job.total_ranks > 1:
        raise UserError(f"--standalone (standalone: true) runs one process without RANK/WORLD_SIZE, but profile "
                        f"{job.profile!r} starts {job.total_ranks} ranks; drop --standalone, or pick a profile "
                        f"with one GPU on one node")
