"""A hyperparameter search from Python: `Job.search(...)` checks and creates a study and drives it; `Study(path)`
watches, continues, cancels and reports one (the command line's `--search`, `status`, `resume`, `cancel` and
`report` of a study's directory call the same functions).

    study = ct.Job("ci-slurm", "n1_gpu1", "demo").search("experiments/searches/demo_lr_wd.yaml", max_parallel=3)
    study.best()["params"]          # {'optim.lr': '0.0312...', 'optim.weight_decay': '...'}
    study.best_run().rerun()        # the best trial again, same image and config
"""
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from cluster_train.host.api.errors import ClusterTrainError
from cluster_train.host.api.run import Run
from cluster_train.host.api.values import checked_number
from cluster_train.host.search import record as rec
from cluster_train.host.search.driver import Report, StudyProgress, drive, unwatched
from cluster_train.host.search.plan import detach, driving_time

DAY_S = 24 * 3600.0
__all__ = ["Study", "StudyProgress"]


class Study:
    """A study's directory (its path, or a study id found in the run roots)."""

    def __init__(self, path: Union[str, Path]) -> None:
        from cluster_train.host import runs

        # made absolute at the door: the trials a resume queues bind their run directories into Apptainer, which
        # takes only absolute paths, and a later call from another working directory names the same study
        self.path = (Path(path) if Path(path).is_dir() else runs.find(str(path))).resolve()
        if not rec.is_study(self.path):
            raise ClusterTrainError(f"{self.path} is not a study's directory (it has no {rec.STUDY})")

    def __repr__(self) -> str:
        return f"Study({str(self.path)!r})"

    def status(self) -> Dict[str, Any]:
        """Trials asked for, finished, pruned, failed and running; the best trial; the driver at work ('' if none)."""
        return rec.progress(self.path)

    def trials(self) -> List[Dict[str, Any]]:
        """Every trial as the driver last saw it: number, state, params, value, run_dir, steps, pruned."""
        return rec.read_trials(self.path)

    def best(self) -> Optional[Dict[str, Any]]:
        return self.status()["best"]

    def best_run(self) -> Run:
        best = self.best()
        if best is None:
            raise ClusterTrainError(f"study {self.path.name} has no completed trial yet")
        return Run(best["run_dir"])

    def resume(self, wait: bool = True, timeout_s: float = DAY_S,
               progress: Optional[Callable[[StudyProgress], None]] = None) -> "Study":
        """Continue the study (a stopped or cancelled one too): driven here until it ends (`wait`; at most
        `timeout_s` seconds, then it stops and a later resume() goes on), or in the background (wait=False: its
        driver's log is driver.log in the study's directory). `progress`: called with a StudyProgress at each event
        of the driver (a trial queued, finished, pruned or failed; the study's summary last)."""
        from cluster_train.host.search.commands import ready_to_drive

        ready_to_drive(self.path, timeout_s)  # before `cancelled` goes or the driver's lock is taken
        report: Report = progress or unwatched
        (self.path / rec.CANCELLED).unlink(missing_ok=True)
        if wait:
            drive(self.path, timeout_s, report)
        else:
            counts = rec.progress(self.path)
            best = counts["best"]["value"] if counts["best"] else None
            report(StudyProgress(detach(self.path, timeout_s), counts["trials"], counts["finished"], counts["pruned"],
                                 counts["failed"], counts["running"], best))
        return self

    def cancel(self) -> str:
        """Stop the driver and cancel every running trial's job; resume() takes the study up again."""
        from cluster_train.host.search.commands import cancel

        return cancel(self.path)

    def report(self) -> Path:
        """report.html of the study (best trial, plots, every trial linked to its run's report)."""
        from cluster_train.host.reports.report import write_report

        return write_report(self.path)


def start(job, search: Union[str, Path, Mapping[str, Any]], max_parallel: Optional[int], wait: bool,
          timeout_s: float, progress: Optional[Callable[[StudyProgress], None]] = None) -> Study:
    """Job.search: its arguments checked at the door, the study checked whole, created, then driven
    (cluster_train/host/search)."""
    from cluster_train.host.api.budgets import within_budget
    from cluster_train.host.jobs.build import Site
    from cluster_train.host.search.commands import refuse_remote
    from cluster_train.host.search.plan import study_plan
    from cluster_train.host.search.spec import read_spec, read_spec_file

    checked_number("max_parallel", max_parallel, whole=True, none_ok=True)
    driving_time(timeout_s)
    if progress is not None and not callable(progress):
        raise ClusterTrainError(f"progress={progress!r} is not callable; pass a function of one StudyProgress, e.g. "
                                f"progress=lambda p: print(p.event)")
    site = Site.load(job.cluster)
    refuse_remote(site)  # in the command line's words
    spec = read_spec(dict(search), "search") if isinstance(search, Mapping) else read_spec_file(str(search))
    plan = study_plan(site, job._request(job.profile, dry_run=False), spec, max_parallel, job.experiment)
    within_budget(plan, job.strict_budget)  # as Job.submit: refused with strict_budget, else a BudgetWarning
    study = Study(plan.queue())
    return study.resume(wait, timeout_s, progress)
