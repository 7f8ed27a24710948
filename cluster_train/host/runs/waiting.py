"""The command line's waits (the library's loops print nothing: cluster_train/host/runs/follow.py, sweep_state.py):
`--wait` and `logs --follow` echo a job's log as it grows, with a status line under it on a terminal (the job's state
and rank 0's last epoch line; plain lines on standard error elsewhere); a sweep's `--wait` shows how many elements
are done, running, failed and queued, then its table."""
import select
import sys
from pathlib import Path
from typing import Dict, Generator, Optional

from cluster_train.host.progress import ignore
from cluster_train.host.runs import sweep_state
from cluster_train.host.runs.ending import describe
from cluster_train.host.runs.follow import Tail, watch
from cluster_train.host.runs.queue import Followed
from cluster_train.host.schedulers import State, adapter
from cluster_train.host.status_line import StatusLine, shown_progress


def follow_plan(followed: Followed, timeout_s: float) -> int:
    """`--wait` of what a command queued: a run, or a sweep (no job id of its own); the exit status."""
    if followed.job_id:
        return follow(adapter(followed.scheduler), followed.job_id, followed.run_dir, timeout_s)
    return wait_sweep(followed.run_dir, timeout_s)


def follow(scheduler, job_id: str, run_dir: Path, timeout_s: float) -> int:
    """Wait for the job, echoing its log as it grows; the exit status is the job's."""
    state = echoed(scheduler, job_id, run_dir, timeout_s)
    print(f"job {job_id} {describe(state)}; results in {run_dir}")
    return 0 if state["state"] == State.COMPLETED else 1


def follow_log(scheduler, job_id: str, run_dir: Path) -> None:
    """`logs --follow`: the log printed as it grows until the job ends, then how it ended (on stderr); the status
    line only on a terminal (piped, `logs --follow` is `tail -f`: the log alone)."""
    state = echoed(scheduler, job_id, run_dir, None, on_terminal_only=True)
    print(f"run-cluster: job {job_id} {describe(state)}", file=sys.stderr)


def echoed(scheduler, job_id: str, run_dir: Path, timeout_s: Optional[float], on_terminal_only: bool = False) -> Dict:
    """The job's log printed as it grows, the status line under it; its end state. A reader that went away
    (`| head`) ends the wait with BrokenPipeError, which bin/run-cluster's main takes."""
    with shown_progress() as shown:
        report = shown if shown.tty or not on_terminal_only else ignore
        return printed(watch(scheduler, job_id, run_dir, timeout_s, Tail(run_dir / "logs"), report=report), shown)


def printed(steps: Generator[str, None, Dict], shown: StatusLine) -> Dict:
    while True:
        try:
            chunk = next(steps)
        except StopIteration as end:
            return end.value
        if chunk:
            shown.above(chunk)
        if reader_gone():
            raise BrokenPipeError("the reader of standard output has gone")  # as `tail -f | head` ends


def reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone: a write would fail, but a quiet log writes nothing
    (Linux reports POLLERR on such a pipe, whatever was asked)."""
    try:
        waiting = select.poll()
        waiting.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in waiting.poll(0))
    except (OSError, ValueError):  # no file descriptor behind sys.stdout
        return False


def wait_sweep(sweep_dir: Path, timeout_s: float, poll_s: float = 2.0) -> int:
    """Until every element has ended, a status line of their counts; the table, and 0 when all completed."""
    with shown_progress() as shown:
        sweep_state.wait_elements(sweep_dir, timeout_s, poll_s, report=shown)
    rows = sweep_state.element_rows(sweep_dir)
    print(sweep_state.status_table(sweep_dir, rows))
    return 0 if all(r["state"] == "COMPLETED" for r in rows) else 1
