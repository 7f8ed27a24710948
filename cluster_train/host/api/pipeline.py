"""Runs of runs from Python: a cluster file's pipeline (its `pipelines:` entry, cluster_train/host/runs/pipeline.py),
every stage checked before the first is queued, each queued to start once the stages it names have COMPLETED, and
cancelled by the scheduler, with that cause in its status, if one of them ends otherwise.

    runs = Pipeline("ci-slurm", "seed001", overrides={"trainer.max_epochs": 1}).submit()   # seed 001 in one call
    experts, fusion = runs                                                                 # one Run per stage

A single run after others: Job(...).submit(after=[run]); a stage's config names an earlier run's directory with
${run:<id>} (in a pipeline's stages, ${run:STAGE}).
"""
from typing import Dict, List, Optional, Sequence

from cluster_train.shared.errors import UserError
from cluster_train.host.api.job import DryRun
from cluster_train.host.api.overrides import Overrides, given_overrides
from cluster_train.host.api.over_ssh import refuse_over_ssh
from cluster_train.host.api.run import Run
from cluster_train.host.jobs import user_code
from cluster_train.host.jobs.build import Site
from cluster_train.host.runs import pipeline as pipelines


class Pipeline:
    """The pipeline `name` of cluster `cluster` (a name in clusters/ or a cluster file's path); `overrides` go to
    every stage, after the stage's own values; `run_id`: its runs are <run_id>-<stage>; `dev` and `stale_image_ok`:
    as Job takes them, for every stage."""

    def __init__(self, cluster: str, name: str, *, overrides: Overrides = (), run_id: Optional[str] = None,
                 dev: bool = False, stale_image_ok: bool = False) -> None:
        self.cluster, self.name, self.run_id = cluster, name, run_id
        self.overrides = given_overrides(overrides)
        self.dev, self.stale_image_ok = dev, stale_image_ok

    def __repr__(self) -> str:
        return f"Pipeline({self.cluster!r}, {self.name!r})"

    @property
    def stages(self) -> List[str]:
        """The stage names, in the order they are queued."""
        return [stage.name for stage in pipelines.stages(Site.load(self.cluster), self.name)]

    def check(self) -> List[str]:
        """Every problem of every stage at once, each line as the command line says it ([] when it would submit)."""
        try:
            self._plan(dry_run=True, discard=True)
        except UserError as err:
            return err.lines
        return []

    def dry_run(self) -> Dict[str, DryRun]:
        """Each stage's script, config, summary and warnings, by stage name; nothing is written or queued."""
        planned = self._plan(dry_run=True, discard=True)
        return {step.stage.name: DryRun(step.sub.script, user_code.recorded_config(step.sub.run), step.sub.summary,
                                        list(step.sub.warnings)) for step in planned}

    def submit(self) -> List[Run]:
        """Check every stage, then queue them in order, each after the stages it names; one Run per stage.
        Raises ClusterTrainError, with nothing queued, on any problem of any stage."""
        queued = pipelines.queue_all(self._plan(dry_run=False))
        return [Run(waited.run_dir) for waited in queued]

    def _plan(self, dry_run: bool, discard: bool = False) -> List[pipelines.Planned]:
        """Every stage built and checked, nothing queued (`discard`: their code snapshots dropped again)."""
        site = Site.load(self.cluster)
        refuse_over_ssh(site, "--pipeline")
        planned = pipelines.plan(site, self.name, self.overrides, run_id=self.run_id,
                                 dry_run=dry_run, stale_image_ok=self.stale_image_ok, dev=self.dev)
        for step in planned if discard else []:
            step.sub.discard()
        return planned


def refuse_options(cluster: Optional[str], given: Sequence[str]) -> None:
    """The command line's options that a pipeline does not take (its stages name their own profiles and waits)."""
    if given or not cluster:
        drop = f"; drop {', '.join(given)}" if given else ""
        raise UserError(f"--pipeline takes a cluster and its stages from the cluster file: run-cluster CLUSTER "
                        f"--pipeline NAME [--set KEY=VALUE] [--dry-run]{drop}")
