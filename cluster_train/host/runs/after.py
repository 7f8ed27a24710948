"""Runs that start after others succeed (`--after RUN[,RUN]`, `after=[run]`): which runs a new job waits on, checked
before anything is queued, and why a run that waited was cancelled.

A job waits on the jobs of runs still queued or running; a run that already COMPLETED needs no dependency (and Slurm
forgets old jobs, so asking it to wait on one would fail); a run that ended any other way will never succeed, so the
new run is refused, naming that state. The scheduler holds the job (its adapter's wait_options) and ends it when a
run it waits on ends otherwise; the run's manifest records what it waited on, so its status can say why it ended.
"""
import dataclasses
from pathlib import Path
from typing import List, Optional, Sequence

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import runs
from cluster_train.host.jobs.build import Request, Site, Submission, build
from cluster_train.host.jobs.run_refs import Waited
from cluster_train.host.runs import ending
from cluster_train.host.schedulers import State, adapter


def build_after(site: Site, request: Request) -> Submission:
    """The job builder's Submission, for a job that waits on the runs of `request.after` still queued or running
    (its `after`): they are checked first, and its ${run:<id>} and inputs may name them."""
    waited = waits_on(site.cluster.name, site.cluster.scheduler, request.after) if request.after else []
    awaited = {**request.awaited, **{w.run_id: Path(w.run_dir) for w in waited}}
    sub = build(site, dataclasses.replace(request, after=[], awaited=awaited))
    sub.after = waited
    return sub


def waits_on(cluster: str, scheduler_name: str, after: Sequence[Path]) -> List[Waited]:
    """The runs of `after` the new job must wait on (those still queued or running); raises one line per run that
    does not exist, is on another cluster, or ended other than COMPLETED, and where this scheduler cannot hold a job."""
    waited, problems = [], []
    for named in after:
        try:
            found = waited_run(cluster, Path(named))
        except UserError as err:
            problems.append(err)
            continue
        if found and found.run_id not in {w.run_id for w in waited}:
            waited.append(found)
    if waited and adapter(scheduler_name).wait_options([w.job_id for w in waited]) is None:
        problems.append(UserError(f"--after: the {scheduler_name} scheduler cannot hold a job until others end; "
                                  f"wait for {', '.join(w.run_id for w in waited)} to complete, then submit"))
    raise_all(problems)
    return waited


def waited_run(cluster: str, named: Path) -> Optional[Waited]:
    """The run `named` as one to wait on; None where it has COMPLETED already."""
    run_dir = runs.find(str(named))
    if not (run_dir / runs.MANIFEST).is_file():
        raise UserError(f"--after {named}: no run there (no {runs.MANIFEST}); give a run's directory or id, "
                        f"e.g. --after runs/<id>")
    manifest = runs.read_manifest(run_dir)
    run_id, job_id = manifest.run_id, manifest.job_id
    if manifest.cluster != cluster:
        raise UserError(f"--after {named}: run {run_id} ran on cluster {manifest.cluster}, not {cluster}; "
                        f"a job can wait only on runs of its own cluster")
    state = ending.run_state(manifest.adapter, job_id, run_dir)
    if state["state"] == State.COMPLETED:
        return None
    if ending.has_ended(state):
        raise UserError(f"--after {named}: run {run_id} ended {ending.describe(state)}, so it will never succeed; "
                        f"rerun it (run-cluster --rerun {named}) and wait on the new run")
    return Waited(run_id, job_id, str(run_dir.resolve()))

