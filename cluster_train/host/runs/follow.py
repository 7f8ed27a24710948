"""Follow a job's log while it runs, and wait for it to end (cluster_train/host/runs/ending.py says when and how it
ended): `watch`, the one polling loop, prints nothing; `wait` and `follow` print for the command line."""
import select
import sys
import time
from pathlib import Path
from typing import Any, Dict, Generator, Iterator, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.runs.ending import EndWatch, describe
from cluster_train.host.schedulers import State


class WaitTimeout(UserError, TimeoutError):
    """The job did not end in time (it goes on): one line for the command line, a TimeoutError for a script."""


def follow(scheduler, job_id: str, run_dir: Path, timeout_s: float) -> int:
    """Wait for the job, echoing its log as it grows; the exit status is the job's."""
    state = wait(scheduler, job_id, run_dir, timeout_s, Tail(run_dir / "logs"))
    print(f"job {job_id} {describe(state)}; results in {run_dir}")
    return 0 if state["state"] == State.COMPLETED else 1


def follow_log(scheduler, job_id: str, run_dir: Path) -> None:
    """`logs --follow`: the log printed as it grows until the job ends, then how it ended (on stderr)."""
    state = wait(scheduler, job_id, run_dir, None, Tail(run_dir / "logs"))
    print(f"run-cluster: job {job_id} {describe(state)}", file=sys.stderr)


def wait(scheduler, job_id: str, run_dir: Path, timeout_s: Optional[float], tail: Optional["Tail"] = None,
         poll_s: float = 1.0) -> Dict:
    """Poll until the job ends, printing its logs as they grow if given a Tail; its end state. Printing happens
    here, in the one thread: a reader that went away (`| head`) ends the wait with BrokenPipeError, which
    bin/run-cluster's main takes."""
    steps = watch(scheduler, job_id, run_dir, timeout_s, tail, poll_s)
    while True:
        try:
            chunk = next(steps)
        except StopIteration as end:
            return end.value
        if chunk:
            print(chunk, end="", flush=True)
        if tail and reader_gone():
            raise BrokenPipeError("the reader of standard output has gone")  # as `tail -f | head` ends


def watch(scheduler, job_id: str, run_dir: Path, timeout_s: Optional[float], tail: Optional["Tail"] = None,
          poll_s: float = 1.0) -> Generator[str, None, Dict]:
    """Poll until the job ends (sbatch --wait polls only every ~10 s); yields what the logs gained since the last
    poll (with a Tail; "" when nothing) and returns the end state. WaitTimeout after timeout_s: the job goes on."""
    end = EndWatch(scheduler, job_id, run_dir)
    deadline = time.time() + timeout_s if timeout_s is not None else None
    while True:
        if tail:
            yield tail.read_new()
        state = end.poll()
        if state is not None:
            if tail:
                yield tail.read_new()  # what the job wrote as it ended
            return state
        if deadline is not None and time.time() > deadline:
            raise WaitTimeout(f"job {job_id} did not finish within {timeout_s:.0f} s (state "
                              f"{end.last['state'].value}); it goes on: bin/run-cluster status {run_dir}")
        time.sleep(poll_s)


def drain(steps: Iterator[str]) -> Any:
    """Run a generator to its end; what it returned."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


def lines_of(chunks: Iterator[str]) -> Iterator[str]:
    """Whole lines (with their newline) out of text that arrives in pieces; the last unfinished piece at the end."""
    pending = ""
    for chunk in chunks:
        *whole, pending = (pending + chunk).split("\n")
        yield from (line + "\n" for line in whole)
    if pending:
        yield pending


def reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone: a write would fail, but a quiet log writes nothing
    (Linux reports POLLERR on such a pipe, whatever was asked)."""
    try:
        waiting = select.poll()
        waiting.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in waiting.poll(0))
    except (OSError, ValueError):  # no file descriptor behind sys.stdout
        return False


def logs_text(run_dir: Path) -> str:
    """Every log of the run as it is now, one after the other."""
    return "".join(path.read_text(errors="replace") for path in _logs(Path(run_dir) / "logs"))


def _logs(logs: Path) -> List[Path]:
    """The scheduler's logs: standard output (*.out) and, where it keeps one apart (LSF -e), standard error."""
    return sorted(p for p in logs.iterdir() if p.is_file() and p.suffix in (".out", ".err")) if logs.is_dir() else []


class Tail:
    """Every log of a run, each read from where the last call stopped (a resumed run's next job adds one)."""

    def __init__(self, logs: Path):
        self.logs, self.read = logs, {}

    def read_new(self) -> str:
        chunks = []
        for path in _logs(self.logs):
            with path.open(errors="replace") as f:
                f.seek(self.read.get(path, 0))
                chunks.append(f.read())
                self.read[path] = f.tell()
        return "".join(chunks)
