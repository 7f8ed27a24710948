"""Run directories and their manifests: everything needed to rerun a job exactly (this module), and the rooms of a
run's life after it is built (cluster_train/host/jobs/):

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
    commands.py     `run-cluster status|logs|cancel|resume`
    table.py        `run-cluster runs`: every run of this machine and of each cluster reached over SSH, one table
    tracker_sync.py `run-cluster sync`: what a run's trackers logged offline, uploaded; `status`'s tracker lines
"""
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host import project, undecodable
from cluster_train.host.data import binding
from cluster_train.host.jobs import user_code

MANIFEST = "manifest.json"
# What --rerun, status, logs and cancel read from a manifest: key -> type (nested keys dotted).
MANIFEST_KEYS = {"run_id": str, "cluster_file": str, "profile": str, "image.sha256": str, "scheduler.name": str,
                 "scheduler.job_id": str}


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


def write_manifest(job, run: cfg.RunConfig, job_id: str, experiment: str, overrides, rerun_of=None,
                   code=None, **extra) -> Dict:
    manifest = {
        "run_id": job.run_id,
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cluster": job.cluster,
        "cluster_file": job.cluster_file,
        "profile": job.profile,
        "experiment": experiment,
        "overrides": list(overrides),
        "image": {"path": job.image.path, "sha256": job.image.sha256, "flavor": job.image.flavor,
                  "registry": job.image.registry, "signed_from": job.image.signed_from or None,
                  "parent_sha256": job.image.parent_sha256 or None},
        "data": binding.manifest_record(job),  # the data image the job binds (data.image), else null
        "scheduler": {"name": job.scheduler, "job_id": job_id},
        "git": project.git_state(),
        # the snapshot of the code that runs (a command's project, --dev's cluster_train package), else null
        "code": code,
        "command": sys.argv,
        "rerun_of": rerun_of,
        "job": job.as_dict(),
        "config": user_code.recorded_config(run),  # a command's: its command, code, binds (no task defaults)
        **extra,  # a sweep element: its sweep, index and swept values
    }
    (Path(job.work.run_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def update_manifest(run_dir: Path, **fields) -> None:
    manifest = read_manifest(run_dir)
    manifest.update(fields)
    (Path(run_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def data_digest(manifest: Dict[str, Any]) -> str:
    """The digest of the data image a run read ("" where it read a directory): a rerun or resume reads it again."""
    return (manifest.get("data") or {}).get("sha256") or ""


def data_version(manifest: Dict[str, Any], digits: int = 12) -> str:
    """The data a run read: its data image (name and digest: the bytes a rerun reads again), else its directory."""
    data = manifest.get("data") or {}
    if data.get("sha256"):
        return f"{data.get('name') or '?'} sha256:{data['sha256'][:digits]}"
    root = ((manifest.get("config") or {}).get("data") or {}).get("root")
    return f"directory {root}" if root else "-"


def read_manifest(run_dir: Path) -> Dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise UserError(f"{run_dir} has no {MANIFEST}; pass a run directory made by run-cluster (runs/<id>)")
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path} is not a valid manifest ({type(err).__name__}); it is damaged, restore it") from None
    for key, kind in MANIFEST_KEYS.items():
        value: Any = manifest
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if not isinstance(value, kind) or not value:
            raise UserError(f"{path} lacks {key}; it is damaged or not a run-cluster manifest, restore it")
    return manifest
