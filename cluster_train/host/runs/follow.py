"""Follow a job's log while it runs, and wait for it to end (cluster_train/host/runs/ending.py says when and how it
ended): `watch`, the one polling loop, prints nothing; it yields the log as it grows and reports the job's state and
rank 0's last epoch line as Progress (the command line's `--wait` and `logs --follow` print both:
cluster_train/host/runs/waiting.py)."""
import time
from pathlib import Path
from typing import Any, Dict, Generator, Iterator, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.progress import Meter, Report, epoch_stage, ignore
from cluster_train.host.runs.ending import EndWatch, shown


class WaitTimeout(UserError, TimeoutError):
    """The job did not end in time (it goes on): one line for the command line, a TimeoutError for a script."""


def watch(scheduler, job_id: str, run_dir: Path, timeout_s: Optional[float], tail: Optional["Tail"] = None,
          poll_s: float = 1.0, report: Report = ignore) -> Generator[str, None, Dict]:
    """Poll until the job ends (sbatch --wait polls only every ~10 s); yields what the logs gained since the last
    poll (with a Tail; "" when nothing) and returns the end state; each poll reports the job's state and, with a Tail,
    rank 0's last epoch line. WaitTimeout after timeout_s: the job goes on."""
    end = EndWatch(scheduler, job_id, run_dir)
    deadline = time.time() + timeout_s if timeout_s is not None else None
    meter, epochs = Meter(f"job {job_id}", unit=""), EpochLines()
    while True:
        if tail:
            yield epochs.read(tail.read_new())
        state = end.poll()
        if state is not None:
            if tail:
                yield epochs.read(tail.read_new())  # what the job wrote as it ended
            report(meter.at(stage=", ".join(filter(None, [shown(state), epochs.last])), final=True))
            return state
        report(meter.at(stage=", ".join(filter(None, [shown(end.last), epochs.last]))))
        if deadline is not None and time.time() > deadline:
            raise WaitTimeout(f"job {job_id} did not finish within {timeout_s:.0f} s (state "
                              f"{end.last['state'].value}); it goes on: bin/run-cluster status {run_dir}")
        time.sleep(poll_s)


class EpochLines:
    """Rank 0's last epoch line in a log read in pieces ("epoch 2/5 step 40 train/loss 0.6931"; "" before the
    first), from whole lines only: "step 4" may be half of "step 40"."""

    def __init__(self):
        self.last, self.partial = "", ""

    def read(self, chunk: str) -> str:
        *whole, self.partial = (self.partial + chunk).rsplit("\n", 1)
        self.last = epoch_stage("".join(whole)) or self.last
        return chunk


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
