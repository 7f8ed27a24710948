"""Run directories (this module; their manifests: manifest.py, everything needed to rerun a job exactly), and the
rooms of a run's life after it is built (cluster_train/host/jobs/):

    manifest.py     the run's record (Manifest): read, written and updated there only
    queue.py        write the run directory, submit, record the manifest; Plan, the one show-and-queue path
    ending.py       how a job ended and whose word that is (the scheduler, the run's own record, the accounting)
    segments.py     the run's own record of its allocations (logs/segments.jsonl)
    causes.py       why a run failed, read from its logs, with the fix
    failures.py     a run's hangs, failure-requeues, restart budget and excluded nodes, as `status` words them
    follow.py       a job's log followed while it runs, and the wait for its end (its progress as events)
    waiting.py      the command line's `--wait` and `logs --follow`: the log, and a status line under it
    run_status.py   one run's status as data (RunStatus): what `status` prints and Run.status() returns
    metrics.py      a run's CSV log read as rows of numbers (Run.metrics())
    resume.py       `resume runs/<id>`: the same run continued in its own directory, same image and code
    rerun.py        `--rerun runs/<id>`: a new run of a recorded one, same image, code, config and data
    sweep.py        sweeps: every element built and checked, queued as one job array
    sweep_state.py  a queued sweep afterwards: its table (one scheduler question per array), wait, cancel, logs
    race.py         `--first-to-start`: two shapes queued, the first to start kept
    after.py        `--after`: the runs a new job waits on, checked before it is queued
    pipeline.py     `--pipeline`: a cluster file's stages, all checked, then queued each after the ones it names
    tracker_sync.py `run-cluster sync`: what a run's trackers logged offline, uploaded; `status`'s tracker lines
"""
import shutil
from pathlib import Path
from typing import List

from cluster_train.shared.errors import UserError
from cluster_train.host import project, undecodable

# a run's record, read and written in one module; here for the callers that name it runs.read_manifest
from cluster_train.host.runs.manifest import (MANIFEST, Manifest, read_manifest,  # noqa: F401
                                              update_manifest, write_manifest)


def find(arg: str) -> Path:
    """A run (or sweep) directory named by its path, or by its id in any cluster's run root (on scratch, where the
    cluster file or your settings say `runs:`); a name that is neither is returned as typed, for the caller's error."""
    undecodable.refuse("run", arg)
    path = Path(arg)
    if path.exists() or not project.RUN_ID.match(arg):
        return path
    roots = run_roots()
    for root in roots:
        if (root / arg).is_dir():
            return root / arg
    raise UserError(f"no run {arg!r} in {', '.join(str(r) for r in roots)}; give the path of its run directory")


def run_roots() -> List[Path]:
    """$CT_RUNS_DIR or the checkout's runs/, then every cluster's run root as this user's settings make it."""
    from cluster_train.host.jobs.build import Site  # here: reading every cluster file is only for a run named by its id

    roots = [project.runs_dir()]
    for file in sorted(project.CLUSTERS.glob("*.yaml")):
        try:
            roots.append(Site.load(str(file)).runs_root)
        except UserError:
            continue  # a cluster whose file or settings do not load has no run root to look in
    return list(dict.fromkeys(roots))


def create(run_dir: Path) -> Path:
    if run_dir.exists():
        raise UserError(f"run directory {run_dir} already exists; choose another --run-id or remove it")
    (run_dir / "logs").mkdir(parents=True)
    return run_dir


def discard(run_dir: Path) -> None:
    """Remove a run directory whose submission failed: nothing half-made is left behind."""
    shutil.rmtree(run_dir, ignore_errors=True)
