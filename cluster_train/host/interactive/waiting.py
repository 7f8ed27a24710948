"""The wait for an interactive job to start (contract C3 of issue 44; the shell's engineer owns the full version):
the scheduler's pending reason and start estimate said whenever they change, Ctrl-C withdraws the request."""
import time
from pathlib import Path
from typing import Callable, Dict, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.schedulers.base import State

WAITING = (State.PENDING, State.CONFIGURING, State.UNKNOWN)


def wait_until_running(scheduler, job_id: str, say: Callable[[str], None], poll_s: float = 2.0,
                       run_dir: Optional[Path] = None) -> Dict[str, str]:
    """The job's state once RUNNING; UserError when it ends before, or when Ctrl-C withdrew it (cancelled)."""
    said = None
    try:
        while True:
            state = scheduler.state(job_id, run_dir)
            if state["state"] == State.RUNNING:
                return state
            if state["state"] not in WAITING or state.get("gone"):
                raise UserError(f"job {job_id} ended before it ran ({state['state']}); see its log in {run_dir}")
            line = pending_line(job_id, state)
            if line != said:
                say(line)
                said = line
            time.sleep(poll_s)
    except KeyboardInterrupt:
        scheduler.cancel(job_id, run_dir)
        raise UserError(f"job {job_id} withdrawn; nothing is allocated") from None


def pending_line(job_id: str, state: Dict[str, str]) -> str:
    start, reason = state.get("start"), state.get("reason", "")
    expected = f"expected start {start}" if start else "no start estimate yet"
    return f"[cluster-train] job {job_id} pending: {reason if reason not in ('', 'None') else 'waiting'}; {expected}"
