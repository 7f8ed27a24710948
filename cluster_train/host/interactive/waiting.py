"""Waiting for an interactive allocation: the scheduler's pending reason and start estimate, said again whenever they
change, until the job runs; Ctrl-C withdraws the request. Prints nothing itself: `say` is the caller's."""
import time
from pathlib import Path
from typing import Callable, Dict, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.runs import ending
from cluster_train.host.scheduling.facts import FINISHED, State

NOT_YET = "no start estimate yet"


def wait_until_running(scheduler, job_id: str, say: Callable[[str], None], poll_s: float = 2.0,
                       run_dir: Optional[Path] = None) -> Dict[str, str]:
    """The job's state() once RUNNING (its "nodes" names the nodes); UserError when it ends, or is forgotten, before
    it runs; on Ctrl-C the job is cancelled and UserError says nothing is allocated."""
    try:
        return polled(scheduler, job_id, say, poll_s, run_dir)
    except KeyboardInterrupt:  # recorded in the run as run-cluster's own cancel, so that status says whose it was
        ending.cancel([(run_dir, job_id)] if run_dir else [], lambda: scheduler.cancel(job_id, run_dir))
        raise UserError(f"interrupted: job {job_id} withdrawn; nothing is allocated") from None


def polled(scheduler, job_id: str, say: Callable[[str], None], poll_s: float,
           run_dir: Optional[Path]) -> Dict[str, str]:
    said = ""
    while True:
        state = scheduler.state(job_id, run_dir)
        if state["state"] == State.RUNNING:
            return state
        if state["state"] in FINISHED or state.get("gone"):
            raise UserError(f"job {job_id} ended before it ran ({ended_how(state)}); nothing is allocated: "
                            f"see its log, or ask again")
        line = pending_line(job_id, state)
        if line != said:
            say(line)
            said = line
        time.sleep(poll_s)


def pending_line(job_id: str, state: Dict[str, str]) -> str:
    """`[cluster-train] job 12 pending: Resources; expected start 2026-11-27T16:40` (or `no start estimate yet`)."""
    word = "pending" if state["state"] in (State.PENDING, State.UNKNOWN) else str(state["state"].value).lower()
    reason = state.get("reason") if state.get("reason") not in ("", "None", None) else "waiting for the scheduler"
    start = state.get("start")
    return f"[cluster-train] job {job_id} {word}: {reason}; " + (f"expected start {start}" if start else NOT_YET)


def ended_how(state: Dict[str, str]) -> str:
    if state.get("gone"):
        return "the scheduler no longer knows it"
    code = state.get("exit_code")
    return f"{state['state'].value}" + (f", exit code {code}" if code else "")
