"""A run as a Python object: `Run(path_or_id)` reads its state, logs, results and metrics, and cancels, resumes or
reruns it, through the same code as `run-cluster status|logs|cancel|resume|report` and `--rerun`; `runs()` lists
runs as `run-cluster runs` does. A sweep's directory is a Run too, whose `.runs` are its elements. A run submitted
from here to a cluster reached over SSH (its runs/<id> holds remote.json) behaves the same: each call asks the
cluster, as the command line does: a Run answers through the backend of its kind (cluster_train/host/api/records.py),
chosen once. Nothing here prints or exits: a refusal is a ClusterTrainError, one line."""
import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Union, overload

from cluster_train.shared.errors import UserError as ClusterTrainError
from cluster_train.host import runs as run_dirs
from cluster_train.host.api.overrides import Overrides, given_overrides
from cluster_train.host.api.records import LocalSweep, Record, SshRun, record_for
from cluster_train.host.progress import Progress
from cluster_train.host.runs.follow import lines_of
from cluster_train.host.runs.metrics import read_metrics
from cluster_train.host.runs.run_status import RunStatus
from cluster_train.host.schedulers import State

__all__ = ["Run", "RunStatus", "State", "runs"]

RESULTS = "results.json"
METRICS = "metrics.csv"
# what the submission put in a run directory, not the run
SUBMITTED = ("manifest.json", "config.yaml", "code", "code.tar", "logs", "call", "interactive.sh")
PathOrId = Union[str, Path]


class Run:
    """One run (or a sweep) of cluster-train, named by its directory or its id.

    >>> run = Run("runs/20261127-101500-ci-slurm-n1_gpu1-ab12")
    >>> run.wait(timeout=600).state
    <State.COMPLETED: 'COMPLETED'>
    >>> run.results()["final_val_acc"]
    """

    def __init__(self, path_or_id: PathOrId) -> None:
        """`path_or_id`: the run's directory or its id. Refuses (ClusterTrainError) a path that holds no run, and an
        id found in no run root."""
        self.path: Path = run_dirs.find(str(path_or_id))
        self._record: Record = record_for(self.path)  # where its answers come from, chosen once

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and other.path.resolve() == self.path.resolve()

    def __hash__(self) -> int:
        return hash(self.path.resolve())

    # ---- what it is --------------------------------------------------------------------------------------------

    @property
    def is_sweep(self) -> bool:
        """A sweep's directory: its elements are `.runs`."""
        return isinstance(self._record, LocalSweep)

    @property
    def id(self) -> str:
        return self._record.id

    @property
    def manifest(self) -> Mapping[str, Any]:
        """The run's manifest.json as a read-only mapping (a run over SSH: fetched from its cluster); a sweep's
        sweep.json."""
        return self._record.manifest()

    @property
    def config(self) -> Dict[str, Any]:
        """The run config it was submitted with, every override applied (manifest.json's "config"), e.g.
        run.config["seed"]; a sweep's: its first element's."""
        return self._record.described().config

    @property
    def cluster(self) -> str:
        return self._record.cluster

    @property
    def profile(self) -> str:
        return self._record.described().profile

    @property
    def runs(self) -> List["Run"]:
        """A sweep's elements, in order (a run's: itself alone)."""
        return [Run(path) for path in self._record.elements()] if self.is_sweep else [self]

    # ---- its state -----------------------------------------------------------------------------------------------

    def status(self) -> RunStatus:
        """Its state now and what ended it, as `run-cluster status` says; a sweep's: see sweep_status."""
        return self._record.status()

    def wait(self, timeout: Optional[float] = None, poll_s: float = 1.0,
             progress: Optional[Callable[[Progress], None]] = None) -> RunStatus:
        """Until the run has ended (a requeued run has not; a sweep: every element), its final status. TimeoutError
        (a ClusterTrainError too) after `timeout` seconds: the job goes on. `progress`, if given, is called at each
        poll with a Progress (cluster_train.host.progress): its `stage` says the job's state and rank 0's last epoch
        line ("RUNNING, epoch 2/5 step 40 train/loss 0.6931"; a sweep: "2 done, 1 running, 0 failed, 3 queued").
        `poll_s`: seconds between looks."""
        return self._record.wait(timeout, poll_s, progress)

    @overload
    def logs(self, follow: Literal[False] = False) -> str: ...

    @overload
    def logs(self, follow: Literal[True]) -> Iterator[str]: ...

    def logs(self, follow: bool = False) -> Union[str, Iterator[str]]:
        """Its log text so far (a sweep: each element's under a header); follow=True: an iterator of its lines as
        they are written, until the job ends."""
        return lines_of(self._record.log_chunks()) if follow else self._record.logs()

    # ---- what it made ----------------------------------------------------------------------------------------------

    def results(self) -> Dict[str, Any]:
        """results.json, which a run writes when its training has finished; a packed run's (several independent
        tasks in one job, each in its own directory): {task name: its results.json}. Without one: ClusterTrainError,
        saying to wait for a run not ended, and what an ended run wrote instead (your own command's files)."""
        self._record.fetch()
        tasks = self._record.described().tasks
        if tasks:
            return {name: self._results_in(Path(name) / RESULTS) for name in tasks}
        return self._results_in(Path(RESULTS))

    def _results_in(self, name: Path) -> Dict[str, Any]:
        path = self.path / name
        if not path.is_file():
            status = self.status()
            if status.ended:  # waiting would change nothing: say what it did write instead
                raise ClusterTrainError(f"run {self.id} ended {status.shown} and wrote no {name}; it wrote "
                                        f"{written(path.parent)}")
            raise ClusterTrainError(f"run {self.id} has no {name} yet (it is {status.shown}); wait for it "
                                    f"to complete: Run({str(self.path)!r}).wait()")
        return json.loads(path.read_text())

    def metrics(self) -> List[Dict[str, Union[int, float, str]]]:
        """metrics.csv's rows (Lightning's CSV logger: one per logged step or validation), numbers as int or float,
        empty cells left out; [] before the first row."""
        self._record.fetch()
        return read_metrics(self.path / METRICS)

    def report(self) -> Path:
        """report.html written in the run's (a sweep's) directory: curves, results, config, image, segments."""
        from cluster_train.host.reports.report import write_report  # matplotlib: only when a report is made

        self._record.fetch()
        return write_report(self.path)

    # ---- what it does next ---------------------------------------------------------------------------------------

    def cancel(self) -> str:
        """Cancel its job (a sweep's: every element not ended), the run recording it first; what was done, in a
        line. A run that has ended keeps how it ended."""
        return self._record.cancel()

    def resume(self, profile: Optional[str] = None, overrides: Overrides = ()) -> "Run":
        """Continue the ended run in its own directory from its last checkpoint (same image and code), on its own
        profile or `profile`, with `overrides` on top (a mapping of dotted keys to values, or "KEY=VALUE" strings
        as --set takes them); the same Run, now with its new job."""
        self._record.resume(profile, given_overrides(overrides))
        return self

    def rerun(self, overrides: Overrides = ()) -> "Run":
        """A new run with this run's cluster, profile, config, image digest, code and data, `overrides` on top (as
        resume takes them, e.g. {"trainer.max_epochs": 2})."""
        return Run(self._record.rerun(given_overrides(overrides)))

    @classmethod
    def _over_ssh(cls, cluster: str, run_id: str) -> "Run":
        """A run that lives on `cluster` (reached over SSH as your settings say), by its id there; its record
        here is runs/<id> (the submission's, or where its files are fetched to)."""
        from cluster_train.host import project

        path = project.run_dir_for(run_id)
        if (path / "remote.json").is_file():
            return cls(path)
        run = cls.__new__(cls)
        run.path = path
        run._record = SshRun(path, {"run_id": run_id, "cluster": cluster, "ssh": cluster})
        return run


def runs(cluster: Optional[str] = None, state: Optional[Union[State, str]] = None) -> List[Run]:
    """Every run `run-cluster runs` lists (this machine's run roots, and each cluster's your settings reach over
    SSH), of one cluster and in one state if named. A cluster that does not answer is left out (the command line
    shows it as an UNREACHABLE row)."""
    from cluster_train.host.views import table

    named = state.value if isinstance(state, State) else state
    here = [Run(row["dir"]) for row in table.in_state(table.local_rows(cluster), named)]
    there = [row for row in table.in_state(table.remote_rows(cluster), named) if row["state"] != "UNREACHABLE"]
    return here + [Run._over_ssh(row["cluster"], row["run"]) for row in there]


def written(run_dir: Path) -> str:
    """What a run wrote in its directory beyond what its submission put there (and its logs/): 'metrics.csv,
    checkpoints/'."""
    made = sorted(f"{p.name}/" if p.is_dir() else p.name for p in run_dir.iterdir()
                  if p.name not in SUBMITTED and not (p.name.startswith("job.") and p.suffix == ".sh"))
    return ", ".join(made) if made else "nothing besides its logs"
