"""`run-cluster CLUSTER --first-to-start PROFILE_A PROFILE_B`: seed 004's hybrid. Two shapes of the same training are
queued; whichever the scheduler starts first is kept and the other cancelled (its run records by whom). On a cluster
reached over SSH, and across clusters, the race is cluster_train/host/remote/race.py's."""
import time
from pathlib import Path
from typing import List, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.jobs.build import Submission
from cluster_train.host.runs import ending
from cluster_train.host.runs.queue import Plan, queue, submitted
from cluster_train.host.schedulers import NOT_STARTED, Scheduler


def race_plan(subs: List[Submission], profiles: List[str], timeout_s: float) -> Plan:
    """Queues both and returns the winner's index and both job ids."""
    return Plan("\n".join(sub.summary for sub in subs), [w for sub in subs for w in sub.warnings],
                "--- dry run: nothing submitted ---\n", queue=lambda: queue_both(subs, timeout_s),
                discard=lambda: [sub.discard() for sub in subs], said=lambda won: said(subs, profiles, *won),
                run_dirs=[Path(sub.job.work.run_dir) for sub in subs])


def queue_both(subs: List[Submission], timeout_s: float) -> Tuple[int, List[str]]:
    """Queue both, keep the first to start, record the outcome in both manifests: the winner's index, the job ids."""
    ids = [queue(sub) for sub in subs]
    run_dirs = [Path(sub.job.work.run_dir) for sub in subs]
    winner = race(subs[0].job.adapter, ids, run_dirs, timeout_s)
    loser = 1 - winner
    for i, run_dir in enumerate(run_dirs):
        runs.update_manifest(run_dir, first_to_start={
            "won": i == winner, "winner_run": run_dirs[winner].name, "cancelled_run": run_dirs[loser].name})
    return winner, ids


def said(subs: List[Submission], profiles: List[str], winner: int, ids: List[str]) -> List[str]:
    """What the command line says of a race: both queued, which one started first."""
    loser = 1 - winner
    return [*(submitted(sub, job_id) for sub, job_id in zip(subs, ids)),
            f"{profiles[winner]} started first (job {ids[winner]}); cancelled {profiles[loser]} (job {ids[loser]})"]


def race(scheduler: Scheduler, job_ids: List[str], run_dirs: List[Path], timeout_s: float,
         poll_s: float = 1.0) -> int:
    """Index of the job that starts first; the other is cancelled (and its run says by whom). On a tie the first one
    listed wins."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        states = [scheduler.state(j, d)["state"] for j, d in zip(job_ids, run_dirs)]
        started = [s not in NOT_STARTED for s in states]
        if any(started):
            winner = started.index(True)
            loser = 1 - winner
            ending.cancel([(run_dirs[loser], job_ids[loser])],
                          lambda: scheduler.cancel(job_ids[loser], run_dirs[loser]))
            return winner
        time.sleep(poll_s)
    raise UserError(f"neither job {job_ids[0]} nor {job_ids[1]} started within "
                    f"{timeout_s:.0f} s; both are still queued")
