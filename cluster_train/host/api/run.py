"""A run as a Python object: `Run(path_or_id)` reads its state, logs, results and metrics, and cancels, resumes or
reruns it, through the same code as `run-cluster status|logs|cancel|resume|report` and `--rerun`; `runs()` lists
runs as `run-cluster runs` does. A sweep's directory is a Run too, whose `.runs` are its elements. A run submitted
from here to a cluster reached over SSH (its runs/<id> holds remote.json) behaves the same: each call asks the
cluster, as the command line does. Nothing here prints or exits: a refusal is a ClusterTrainError, one line."""
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List, Literal, Optional, Sequence, Union, overload

from cluster_train.shared.errors import UserError as ClusterTrainError
from cluster_train.host import runs as run_dirs
from cluster_train.host.progress import Progress, ignore
from cluster_train.host.runs import follow as following, sweep_state
from cluster_train.host.runs.ending import cancel_run
from cluster_train.host.runs.follow import drain, lines_of
from cluster_train.host.runs.metrics import read_metrics
from cluster_train.host.runs.run_status import RunStatus, status_of
from cluster_train.host.schedulers import State, adapter

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
        """Refuses (ClusterTrainError) a path that holds no run, and an id found in no run root."""
        self.path: Path = run_dirs.find(str(path_or_id))
        self._remote: Optional[Dict[str, Any]] = remote_record(self.path)
        self._manifest: Optional[Dict[str, Any]] = None
        if self._remote is None and not self.is_sweep:
            self._manifest = run_dirs.read_manifest(self.path)

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
        return sweep_state.is_sweep(self.path)

    @property
    def id(self) -> str:
        if self._remote is not None:
            return self._remote["run_id"]
        return sweep_state.read_sweep(self.path)["sweep_id"] if self.is_sweep else self.manifest["run_id"]

    @property
    def manifest(self) -> Dict[str, Any]:
        """The run's manifest.json (a run over SSH: fetched from its cluster); a sweep's sweep.json."""
        if self.is_sweep:
            return sweep_state.read_sweep(self.path)
        if self._manifest is None:
            self._fetch()
            self._manifest = run_dirs.read_manifest(self.path)
        return self._manifest

    @property
    def config(self) -> Dict[str, Any]:
        """The run config it was submitted with, every override applied (manifest.json's "config"), e.g.
        run.config["seed"]; a sweep's: its first element's."""
        return (self.runs[0] if self.is_sweep else self).manifest["config"]

    @property
    def cluster(self) -> str:
        if self._remote is not None:
            return self._remote["cluster"]
        manifest = self.runs[0].manifest if self.is_sweep else self.manifest
        return manifest.get("cluster") or Path(manifest["cluster_file"]).stem

    @property
    def profile(self) -> str:
        return (self.runs[0] if self.is_sweep else self).manifest["profile"]

    @property
    def runs(self) -> List["Run"]:
        """A sweep's elements, in order (a run's: itself alone)."""
        if not self.is_sweep:
            return [self]
        return [Run(element["run_dir"]) for element in sweep_state.read_sweep(self.path)["elements"]]

    # ---- its state -----------------------------------------------------------------------------------------------

    def status(self) -> RunStatus:
        """Its state now and what ended it, as `run-cluster status` says; a sweep's: see sweep_status."""
        if self._remote is not None:
            return remote().status(self._remote)
        if self.is_sweep:
            return sweep_state.sweep_status(self.path)
        return status_of(self.manifest, adapter(self.manifest["scheduler"]["name"]), self.path)

    def wait(self, timeout: Optional[float] = None, poll_s: float = 1.0,
             progress: Optional[Callable[[Progress], None]] = None) -> RunStatus:
        """Until the run has ended (a requeued run has not; a sweep: every element), its final status. TimeoutError
        (a ClusterTrainError too) after `timeout` seconds: the job goes on. `progress`, if given, is called at each
        poll with a Progress (cluster_train.host.progress): its `stage` says the job's state and rank 0's last epoch
        line ("RUNNING, epoch 2/5 step 40 train/loss 0.6931"; a sweep: "2 done, 1 running, 0 failed, 3 queued")."""
        if self._remote is not None:
            return self._wait_there(timeout, max(poll_s, remote().POLL_S))
        report = progress or ignore
        if self.is_sweep:
            if not sweep_state.wait_elements(self.path, timeout, poll_s, report):
                raise following.WaitTimeout(f"sweep {self.id} did not end within {timeout:.0f} s; it goes on: "
                                            f"bin/run-cluster status {self.path}")
        else:
            scheduler, job_id = adapter(self.manifest["scheduler"]["name"]), self.manifest["scheduler"]["job_id"]
            tail = following.Tail(self.path / "logs") if progress else None  # read for its epoch lines
            drain(following.watch(scheduler, job_id, self.path, timeout, tail, poll_s, report))
        return self.status()

    def _wait_there(self, timeout: Optional[float], poll_s: float) -> RunStatus:
        """A run over SSH: its cluster asked every poll_s until the run has ended."""
        deadline = time.time() + timeout if timeout is not None else None
        while True:
            status = remote().status(self._remote)
            if status.ended:
                return status
            if deadline is not None and time.time() > deadline:
                raise following.WaitTimeout(f"run {self.id} did not end within {timeout:.0f} s (state "
                                            f"{status.shown}); it goes on: bin/run-cluster status {self.id}")
            time.sleep(poll_s)

    @overload
    def logs(self, follow: Literal[False] = False) -> str: ...

    @overload
    def logs(self, follow: Literal[True]) -> Iterator[str]: ...

    def logs(self, follow: bool = False) -> Union[str, Iterator[str]]:
        """Its log text so far (a sweep: each element's under a header); follow=True: an iterator of its lines as
        they are written, until the job ends."""
        if follow:
            return lines_of(self._log_chunks())
        if self._remote is not None:
            return remote().logs(self._remote)
        return (sweep_state.logs_text if self.is_sweep else following.logs_text)(self.path)

    def _log_chunks(self) -> Iterator[str]:
        if self._remote is not None:
            return remote().follow(self._remote)
        if self.is_sweep:
            raise ClusterTrainError(f"logs --follow follows one run; name an element: {self.path / 'e0'}")
        scheduler, job_id = adapter(self.manifest["scheduler"]["name"]), self.manifest["scheduler"]["job_id"]
        return following.watch(scheduler, job_id, self.path, None, following.Tail(self.path / "logs"))

    # ---- what it made ----------------------------------------------------------------------------------------------

    def results(self) -> Dict[str, Any]:
        """results.json, which a run writes when its training has finished; a packed run's (several independent
        tasks in one job, each in its own directory): {task name: its results.json}. Without one: ClusterTrainError,
        saying to wait for a run not ended, and what an ended run wrote instead (your own command's files)."""
        self._fetch()
        tasks = [task["name"] for task in self.manifest.get("job", {}).get("tasks") or []]
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
        self._fetch()
        return read_metrics(self.path / METRICS)

    def report(self) -> Path:
        """report.html written in the run's (a sweep's) directory: curves, results, config, image, segments."""
        from cluster_train.host.reports.report import write_report  # matplotlib: only when a report is made

        self._fetch()
        return write_report(self.path)

    # ---- what it does next ---------------------------------------------------------------------------------------

    def cancel(self) -> str:
        """Cancel its job (a sweep's: every element not ended), the run recording it first; what was done, in a
        line. A run that has ended keeps how it ended."""
        if self._remote is not None:
            return remote().cancel(self._remote)
        if self.is_sweep:
            return sweep_state.cancel(self.path)
        return cancel_run(self.manifest, self.path)

    def resume(self, profile: Optional[str] = None, overrides: Sequence[str] = ()) -> "Run":
        """Continue the ended run in its own directory from its last checkpoint (same image and code), on its own
        profile or `profile`, with `overrides` ("KEY=VALUE") on top; the same Run, now with its new job."""
        if self._remote is not None:
            remote().resume(self._remote, profile, list(overrides))
            return Run(self.path)
        if self.is_sweep:
            raise ClusterTrainError(f"resume one element of sweep {self.id} at a time from Python (e.g. "
                                    f"Run({str(self.path / 'e0')!r}).resume()); bin/run-cluster resume {self.path} "
                                    f"resumes them all")
        from cluster_train.host.runs.resume import prepare_resume, queue_resume

        run_dir = self.path.resolve()
        queue_resume(prepare_resume(run_dir, profile, list(overrides), dry_run=False), run_dir)
        return Run(run_dir)

    def rerun(self, overrides: Sequence[str] = ()) -> "Run":
        """A new run with this run's cluster, profile, config, image digest, code and data, `overrides` on top."""
        if self._remote is not None:
            return Run(remote().rerun(self._remote, list(overrides)))
        if self.is_sweep:
            raise ClusterTrainError(f"rerun one element of sweep {self.id}: Run({str(self.path / 'e0')!r}).rerun()")
        from cluster_train.host.runs.queue import one_run
        # Job.rerun_of(run) builds the same (job.py imports Run)
        from cluster_train.host.runs.rerun import rerun_submission

        plan = one_run(rerun_submission(self.path, list(overrides)))
        plan.queue()
        return Run(plan.run_dirs[0])

    def _fetch(self) -> None:
        """A run over SSH: its small files here (rsync: what changed since the last fetch)."""
        if self._remote is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            remote().fetch(self._remote, self.path)

    @classmethod
    def over_ssh(cls, cluster: str, run_id: str) -> "Run":
        """A run that lives on `cluster` (reached over SSH as your settings say), by its id there; its record
        here is runs/<id> (the submission's, or where its files are fetched to)."""
        from cluster_train.host import project

        path = project.run_dir_for(run_id)
        if (path / "remote.json").is_file():
            return cls(path)
        run = cls.__new__(cls)
        run.path, run._manifest = path, None
        run._remote = {"run_id": run_id, "cluster": cluster, "ssh": cluster}
        return run


def runs(cluster: Optional[str] = None, state: Optional[Union[State, str]] = None) -> List[Run]:
    """Every run `run-cluster runs` lists (this machine's run roots, and each cluster's your settings reach over
    SSH), of one cluster and in one state if named. A cluster that does not answer is left out (the command line
    shows it as an UNREACHABLE row)."""
    from cluster_train.host.views import table

    named = state.value if isinstance(state, State) else state
    here = [Run(row["dir"]) for row in table.in_state(table.local_rows(cluster), named)]
    there = [row for row in table.in_state(table.remote_rows(cluster), named) if row["state"] != "UNREACHABLE"]
    return here + [Run.over_ssh(row["cluster"], row["run"]) for row in there]


def remote_record(path: Path) -> Optional[Dict[str, Any]]:
    """remote.json of a run submitted from here to a cluster over SSH; None for a run of this machine."""
    if not (Path(path) / "remote.json").is_file():
        return None
    from cluster_train.host.remote.commands import record_of

    return record_of(path)


def remote() -> ModuleType:
    """cluster_train/host/remote/runs.py, imported only for a run over SSH."""
    from cluster_train.host.remote import runs as remote_runs

    return remote_runs


def written(run_dir: Path) -> str:
    """What a run wrote in its directory beyond what its submission put there (and its logs/): 'metrics.csv,
    checkpoints/'."""
    made = sorted(f"{p.name}/" if p.is_dir() else p.name for p in run_dir.iterdir()
                  if p.name not in SUBMITTED and not (p.name.startswith("job.") and p.suffix == ".sh"))
    return ", ".join(made) if made else "nothing besides its logs"
