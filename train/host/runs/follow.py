"""Follow a job's log while it runs, and wait for it to end (train/host/runs/ending.py says when and how it ended)."""
import select
import sys
import time
from pathlib import Path
from typing import Dict, Optional

from train.shared.errors import UserError
from train.host.runs.ending import EndWatch, describe
from train.host.schedulers import State


def follow(scheduler, job_id: str, run_dir: Path, timeout_s: float) -> int:
    """Wait for the job, echoing its log as it grows; the exit status is the job's."""
    state = wait(scheduler, job_id, run_dir, timeout_s, Tail(run_dir / "logs"))
    print(f"job {job_id} {describe(state)}; results in {run_dir}")
    return 0 if state["state"] == State.COMPLETED else 1


def follow_log(scheduler, job_id: str, run_dir: Path, forever: bool) -> None:
    if not forever:
        for path in _logs(run_dir / "logs"):
            print(path.read_text(errors="replace"), end="")
        return
    state = wait(scheduler, job_id, run_dir, None, Tail(run_dir / "logs"))
    print(f"run-cluster: job {job_id} {describe(state)}", file=sys.stderr)


def wait(scheduler, job_id: str, run_dir: Path, timeout_s: Optional[float], tail: Optional["Tail"] = None,
         poll_s: float = 1.0) -> Dict:
    """Poll until the job ends (sbatch --wait polls only every ~10 s), printing its logs as they grow if given a
    Tail; its end state. Printing happens here, in the one thread: a reader that went away (`| head`) ends the wait
    with BrokenPipeError, which bin/run-cluster's main takes."""
    watch = EndWatch(scheduler, job_id, run_dir)
    deadline = time.time() + timeout_s if timeout_s is not None else None
    while True:
        if tail:
            tail.print_new()
            if reader_gone():
                raise BrokenPipeError("the reader of standard output has gone")  # as `tail -f | head` ends
        state = watch.poll()
        if state is not None:
            if tail:
                tail.print_new()  # what the job wrote as it ended
            return state
        if deadline is not None and time.time() > deadline:
            raise UserError(f"job {job_id} did not finish within {timeout_s:.0f} s (state {watch.last['state'].value}); it "
                            f"goes on: bin/run-cluster status {run_dir}")
        time.sleep(poll_s)


def reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone: a write would fail, but a quiet log writes nothing
    (Linux reports POLLERR on such a pipe, whatever was asked)."""
    try:
        waiting = select.poll()
        waiting.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in waiting.poll(0))
    except (OSError, ValueError):  # no file descriptor behind sys.stdout
        return False


def _logs(logs: Path):
    """The scheduler's logs: standard output (*.out) and, where it keeps one apart (LSF -e), standard error."""
    return sorted(p for p in logs.iterdir() if p.is_file() and p.suffix in (".out", ".err")) if logs.is_dir() else []


class Tail:
    """Every log of a run, each printed from where the last call stopped (a resumed run's next job adds one)."""

    def __init__(self, logs: Path):
        self.logs, self.printed = logs, {}

    def print_new(self) -> None:
        for path in _logs(self.logs):
            with path.open(errors="replace") as f:
                f.seek(self.printed.get(path, 0))
                chunk = f.read()
                self.printed[path] = f.tell()
            if chunk:
                print(chunk, end="", flush=True)
