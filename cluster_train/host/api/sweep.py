"""A queued sweep from Python (`Job.sweep(...)`, or `Sweep("runs/<sweep-id>")` for one queued before): wait for its
elements with a progress callback, read them as rows (one per element: its values, state and results; a pandas
DataFrame where pandas is installed), cancel it. Its directory is a Run too (cluster_train/host/api/run.py), whose
status, logs and report this uses: nothing here asks the scheduler on its own.

    sweep = ct.Job("ci-slurm", "n1_gpu1", "demo").sweep({"optim.lr": [0.1, 0.01]})
    sweep.wait(progress=lambda p: print(f"{p.ended}/{p.total}", p.counts))
    sweep.results()     # rows: element, optim.lr, state, final_val_acc, ..., run_dir
"""
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from cluster_train.host.api.errors import ClusterTrainError
from cluster_train.host.api.run import Run, RunStatus
from cluster_train.host.api.values import checked_number
from cluster_train.host.progress import Progress
from cluster_train.host.runs import sweep_state

__all__ = ["Sweep", "SweepProgress"]


@dataclass(frozen=True)
class SweepProgress:
    """What a sweep's `wait(progress=...)` callback gets at each poll: `counts` of its elements by state ("done":
    completed, "running", "failed": ended otherwise, "queued": all else), `ended` (done + failed) of `total`,
    `elapsed_s` since the wait began, and `final` on the last call (every element has ended)."""

    counts: Dict[str, int]
    ended: int
    total: int
    elapsed_s: float
    final: bool


@dataclass(frozen=True)
class Sweep:
    """A queued sweep (one job array): its directory `path` and one Run per element, `runs`, in the order of the
    combinations. `Sweep(path)` reads a sweep queued before (its directory, a relative path too, or its id; `runs`
    read from its sweep.json)."""

    path: Path
    runs: List[Run] = field(default_factory=list)

    def __post_init__(self) -> None:
        # made absolute at the door: a later call from another working directory names the same sweep
        run = Run(self.path)
        if not run.is_sweep:
            raise ClusterTrainError(f"{self.path} is not a sweep's directory (it has no {sweep_state.SWEEP}); "
                                    f"name one that `run-cluster ... --sweep` made, or use Run({str(self.path)!r})")
        object.__setattr__(self, "path", run.path.resolve())
        if not self.runs:
            object.__setattr__(self, "runs", run.runs)

    def status(self) -> RunStatus:
        """The sweep's state as `run-cluster status` says it; `.details`: each element's row."""
        return Run(self.path).status()

    def wait(self, timeout: Optional[float] = None, progress: Optional[Callable[[SweepProgress], None]] = None,
             poll_s: float = 2.0) -> RunStatus:
        """Until every element has ended, the sweep's final status. `timeout`: seconds at most (None: however long
        it takes), then TimeoutError (a ClusterTrainError too; the sweep goes on). `progress`: called at each poll
        with a SweepProgress. `poll_s`: seconds between polls."""
        checked_number("timeout", timeout, above=0, none_ok=True)
        checked_number("poll_s", poll_s, above=0)
        report = (lambda moment: progress(progress_of(moment, len(self.runs)))) if progress else None
        return Run(self.path).wait(timeout, poll_s, report)

    def results(self, as_frame: Optional[bool] = None) -> Any:
        """One row per element, in order: `element` (its index), its swept values (by key, as recorded), `state`,
        its results.json's values (none before it has completed) and `run_dir`. `as_frame`: a pandas DataFrame
        (None: where pandas is installed), else a list of dicts."""
        record = sweep_state.read_sweep(self.path)
        states = {name: row["state"] for name, row in (self.status().details or {}).items()}
        rows = [{"element": e["index"], **e["values"], "state": states.get(f"e{e['index']}", "UNKNOWN"),
                 **results_of(Path(e["run_dir"])), "run_dir": e["run_dir"]} for e in record["elements"]]
        return frame(rows) if as_frame is not False and (as_frame or pandas_here()) else rows

    def cancel(self) -> str:
        """Cancel every element that has not ended (one line: what was done); ended ones keep how they ended."""
        return Run(self.path).cancel()


def progress_of(moment: Progress, total: int) -> SweepProgress:
    """A sweep's wait event (its stage: '2 done, 1 running, 0 failed, 3 queued', sweep_state.counts_stage) as
    counts."""
    counts = {name: int(n) for n, name in (part.split(" ", 1) for part in moment.stage.split(", ") if part)}
    ended = counts.get("done", 0) + counts.get("failed", 0)
    return SweepProgress(counts, ended, total, moment.elapsed_s, moment.final)


def results_of(run_dir: Path) -> Dict[str, Any]:
    path = run_dir / "results.json"
    try:
        loaded = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}  # half written while the run ends: the next call reads it whole
    return loaded if isinstance(loaded, dict) else {}


def pandas_here() -> bool:
    from importlib.util import find_spec

    return find_spec("pandas") is not None


def frame(rows: List[Dict[str, Any]]) -> Any:
    try:
        import pandas
    except ImportError:
        raise ClusterTrainError("results(as_frame=True) needs pandas, which is not installed here; pip install "
                                "pandas, or take the rows as dicts: results(as_frame=False)") from None
    return pandas.DataFrame(rows)


def sweep_of(path: Union[str, Path], run_dirs: List[Path]) -> Sweep:
    """The Sweep Job.sweep returns: its directory and its elements' Runs."""
    return Sweep(Path(path), [Run(run_dir) for run_dir in run_dirs])
