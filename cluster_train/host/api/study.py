"""A hyperparameter search from Python: `Job.search(...)` checks and creates a study and drives it; `Study(path)`
watches, continues, cancels and reports one (the command line's `--search`, `status`, `resume`, `cancel` and
`report` of a study's directory call the same functions).

    study = ct.Job("ci-slurm", "n1_gpu1", "demo").search("experiments/searches/demo_lr_wd.yaml", max_parallel=3)
    study.best()["params"]          # {'optim.lr': '0.0312...', 'optim.weight_decay': '...'}
    study.best_run().rerun()        # the best trial again, same image and config
"""
import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from cluster_train.host.api.errors import ClusterTrainError
from cluster_train.host.api.run import Run
from cluster_train.host.search import record as rec

LOG = logging.getLogger("cluster_train.search")  # the driver's lines: the API never prints
DAY_S = 24 * 3600.0


class Study:
    """A study's directory (its path, or a study id found in the run roots)."""

    def __init__(self, path: Union[str, Path]) -> None:
        from cluster_train.host import runs

        self.path = Path(path) if Path(path).is_dir() else runs.find(str(path))
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

    def resume(self, wait: bool = True, timeout_s: float = DAY_S) -> "Study":
        """Continue the study (a stopped or cancelled one too): here until it ends (`wait`), or in the background."""
        from cluster_train.host.search.driver import drive
        from cluster_train.host.search.plan import detach

        (self.path / rec.CANCELLED).unlink(missing_ok=True)
        if wait:
            drive(self.path, timeout_s, say=LOG.info)
        else:
            LOG.info(detach(self.path, timeout_s))
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
          timeout_s: float) -> Study:
    """Job.search: the study checked whole, created, then driven (cluster_train/host/search)."""
    from cluster_train.host.api.over_ssh import refuse_over_ssh
    from cluster_train.host.jobs.build import Site
    from cluster_train.host.search.plan import study_plan
    from cluster_train.host.search.spec import read_spec, read_spec_file

    site = Site.load(job.cluster)
    refuse_over_ssh(site, "a search")
    spec = read_spec(dict(search), "search") if isinstance(search, Mapping) else read_spec_file(str(search))
    plan = study_plan(site, job.request(job.profile, dry_run=False), spec, max_parallel, job.experiment)
    study = Study(plan.queue())
    return study.resume(wait, timeout_s)
