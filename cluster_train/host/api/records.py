"""Where a `Run` (cluster_train/host/api/run.py) finds its answers: one interface, `Record`, and a backend per kind of
run directory, chosen once by `record_for` (submitit's idea: one handle class per backend, not a branch per call):

    LocalRun   a run of this machine's schedulers: its manifest, logs and the scheduler, through the same code as
               `run-cluster status|logs|cancel|resume` and `--rerun`
    LocalSweep a sweep's directory (sweep.json): its elements, as one
    SshRun     a run on a cluster reached over SSH (its runs/<id> here holds remote.json): each question that
               cluster's own bin/run-cluster (cluster_train/host/remote/runs.py), its files fetched here to be read

Nothing here prints or exits: a refusal is a ClusterTrainError, one line."""
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

from cluster_train.shared.errors import UserError as ClusterTrainError
from cluster_train.host.api.overrides import Overrides
from cluster_train.host.progress import Progress, ignore
from cluster_train.host.runs import follow as following, sweep_state
from cluster_train.host.runs.ending import cancel_run
from cluster_train.host.runs.follow import drain
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.runs.run_status import RunStatus, status_of

Progressed = Optional[Callable[[Progress], None]]


class Record(ABC):
    """What a Run asks of where it lives; each backend answers all of it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    @abstractmethod
    def id(self) -> str: ...

    @abstractmethod
    def manifest(self) -> Mapping[str, Any]:
        """A run's Manifest (over SSH: fetched first); a sweep's sweep.json."""

    def described(self) -> Manifest:
        """The manifest whose config, profile and cluster are the run's (a sweep's: its first element's)."""
        manifest = self.manifest()
        assert isinstance(manifest, Manifest)  # a sweep overrides this
        return manifest

    @property
    def cluster(self) -> str:
        return self.described().cluster

    def elements(self) -> List[Path]:
        """A sweep's element directories in order; a run's: its own."""
        return [self.path]

    def fetch(self) -> None:
        """Its files here, to be read (a run of this machine's: they are)."""

    @abstractmethod
    def status(self) -> RunStatus: ...

    @abstractmethod
    def wait(self, timeout: Optional[float], poll_s: float, progress: Progressed) -> RunStatus: ...

    @abstractmethod
    def logs(self) -> str: ...

    @abstractmethod
    def log_chunks(self) -> Iterator[str]:
        """What the log gained, chunk by chunk, until the job ends."""

    @abstractmethod
    def cancel(self) -> str: ...

    @abstractmethod
    def resume(self, profile: Optional[str], overrides: Overrides) -> None:
        """The run continued in its own directory, with a new job."""

    @abstractmethod
    def rerun(self, overrides: Overrides) -> Path:
        """A new run of the recorded one; its directory."""


class LocalRun(Record):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        Manifest.read(path)  # a directory holding no run (or a damaged one) is refused when it is named

    @property
    def id(self) -> str:
        return self.manifest().run_id

    def manifest(self) -> Manifest:
        return Manifest.read(self.path)  # read each time: a status, resume or cancel elsewhere changes it

    def status(self) -> RunStatus:
        manifest = self.manifest()
        return status_of(manifest, manifest.adapter, self.path)

    def wait(self, timeout: Optional[float], poll_s: float, progress: Progressed) -> RunStatus:
        manifest = self.manifest()
        tail = following.Tail(self.path / "logs") if progress else None  # read for its epoch lines
        drain(following.watch(manifest.adapter, manifest.job_id, self.path, timeout, tail, poll_s,
                              progress or ignore))
        return self.status()

    def logs(self) -> str:
        return following.logs_text(self.path)

    def log_chunks(self) -> Iterator[str]:
        manifest = self.manifest()
        return following.watch(manifest.adapter, manifest.job_id, self.path, None, following.Tail(self.path / "logs"))

    def cancel(self) -> str:
        return cancel_run(self.manifest(), self.path)

    def resume(self, profile: Optional[str], overrides: Overrides) -> None:
        from cluster_train.host.runs.resume import prepare_resume, queue_resume  # builds: only when asked

        run_dir = self.path.resolve()
        queue_resume(prepare_resume(run_dir, profile, overrides, dry_run=False), run_dir)

    def rerun(self, overrides: Overrides) -> Path:
        # Job.rerun_of(run) builds the same (api/job.py imports Run)
        from cluster_train.host.runs.queue import one_run
        from cluster_train.host.runs.rerun import rerun_submission

        plan = one_run(rerun_submission(self.path, overrides))
        plan.queue()
        return plan.run_dirs[0]


class LocalSweep(Record):
    @property
    def id(self) -> str:
        return self.manifest()["sweep_id"]

    def manifest(self) -> Dict[str, Any]:
        return sweep_state.read_sweep(self.path)

    def described(self) -> Manifest:
        return Manifest.read(self.elements()[0])

    def elements(self) -> List[Path]:
        return [Path(element["run_dir"]) for element in self.manifest()["elements"]]

    def status(self) -> RunStatus:
        return sweep_state.sweep_status(self.path)

    def wait(self, timeout: Optional[float], poll_s: float, progress: Progressed) -> RunStatus:
        if not sweep_state.wait_elements(self.path, timeout, poll_s, progress or ignore):
            raise following.WaitTimeout(f"sweep {self.id} did not end within {timeout:.0f} s; it goes on: "
                                        f"bin/run-cluster status {self.path}")
        return self.status()

    def logs(self) -> str:
        return sweep_state.logs_text(self.path)

    def log_chunks(self) -> Iterator[str]:
        raise ClusterTrainError(f"logs --follow follows one run; name an element: {self.path / 'e0'}")

    def cancel(self) -> str:
        return sweep_state.cancel(self.path)

    def resume(self, profile: Optional[str], overrides: Overrides) -> None:
        raise ClusterTrainError(f"resume one element of sweep {self.id} at a time from Python (e.g. "
                                f"Run({str(self.path / 'e0')!r}).resume()); bin/run-cluster resume {self.path} "
                                f"resumes them all")

    def rerun(self, overrides: Overrides) -> Path:
        raise ClusterTrainError(f"rerun one element of sweep {self.id}: Run({str(self.path / 'e0')!r}).rerun()")


class SshRun(Record):
    """`remote`: remote.json's record (run id, cluster, how it is reached)."""

    def __init__(self, path: Path, remote: Dict[str, Any]) -> None:
        super().__init__(path)
        self.remote = remote
        self._manifest: Optional[Manifest] = None  # fetched once: each fetch is an rsync over SSH

    @property
    def id(self) -> str:
        return self.remote["run_id"]

    @property
    def cluster(self) -> str:
        return self.remote["cluster"]

    def manifest(self) -> Manifest:
        if self._manifest is None:
            self.fetch()
            self._manifest = Manifest.read(self.path)
        return self._manifest

    def fetch(self) -> None:
        """Its small files here (rsync: what changed since the last fetch)."""
        self.path.mkdir(parents=True, exist_ok=True)
        there().fetch(self.remote, self.path)

    def status(self) -> RunStatus:
        return there().status(self.remote)

    def wait(self, timeout: Optional[float], poll_s: float, progress: Progressed) -> RunStatus:
        """Its cluster asked every poll (at most as often as a follow asks) until the run has ended."""
        deadline = time.time() + timeout if timeout is not None else None
        while True:
            status = self.status()
            if status.ended:
                return status
            if deadline is not None and time.time() > deadline:
                raise following.WaitTimeout(f"run {self.id} did not end within {timeout:.0f} s (state "
                                            f"{status.shown}); it goes on: bin/run-cluster status {self.id}")
            time.sleep(max(poll_s, there().POLL_S))

    def logs(self) -> str:
        return there().logs(self.remote)

    def log_chunks(self) -> Iterator[str]:
        return there().follow(self.remote)

    def cancel(self) -> str:
        return there().cancel(self.remote)

    def resume(self, profile: Optional[str], overrides: Overrides) -> None:
        there().resume(self.remote, profile, ssh_lines(overrides))
        self._manifest = None  # its job changed there: fetched again when next read

    def rerun(self, overrides: Overrides) -> Path:
        return there().rerun(self.remote, ssh_lines(overrides))


def record_for(path: Path) -> Record:
    """The backend of a run directory, chosen once: remote.json, sweep.json, else a run of this machine."""
    from cluster_train.host.remote.commands import record_of  # the SSH side: imported only for such a run

    remote = record_of(path) if (Path(path) / "remote.json").is_file() else None
    if remote is not None:
        return SshRun(path, remote)
    return LocalSweep(path) if sweep_state.is_sweep(path) else LocalRun(path)


def there():
    """cluster_train/host/remote/runs.py, imported only for a run over SSH."""
    from cluster_train.host.remote import runs as remote_runs

    return remote_runs


def ssh_lines(overrides: Overrides) -> List[str]:
    """Overrides as the login node's --set takes them: text its parse types back as the same values."""
    from cluster_train.shared import config as cfg
    from cluster_train.host.jobs.overrides import typed_overrides

    return cfg.setting_lines(typed_overrides(overrides))
