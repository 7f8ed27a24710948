"""Run directories and their manifests: everything needed to rerun a job exactly."""
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict

from train import config as cfg
from train.errors import UserError
from train.host import project
from train.host.job import Job

MANIFEST = "manifest.json"


def create(run_dir: Path) -> Path:
    if run_dir.exists():
        raise UserError(f"run directory {run_dir} already exists; choose another --run-id or remove it")
    (run_dir / "logs").mkdir(parents=True)
    return run_dir


def discard(run_dir: Path) -> None:
    """Remove a run directory whose submission failed: nothing half-made is left behind."""
    shutil.rmtree(run_dir, ignore_errors=True)


def write_manifest(job: Job, run: cfg.RunConfig, job_id: str, experiment: str, overrides, rerun_of=None) -> Dict:
    manifest = {
        "run_id": job.run_id,
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cluster": job.cluster,
        "cluster_file": job.cluster_file,
        "profile": job.profile,
        "experiment": experiment,
        "overrides": list(overrides),
        "image": {"path": job.image, "sha256": job.image_sha256, "flavor": job.image_flavor},
        "scheduler": {"name": job.scheduler, "job_id": job_id},
        "git": project.git_state(),
        "command": sys.argv,
        "rerun_of": rerun_of,
        "job": job.as_dict(),
        "config": cfg.to_dict(run),
    }
    (Path(job.run_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def update_manifest(run_dir: Path, **fields) -> None:
    manifest = read_manifest(run_dir)
    manifest.update(fields)
    (Path(run_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def read_manifest(run_dir: Path) -> Dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise UserError(f"{run_dir} has no {MANIFEST}; pass a run directory made by run-cluster (runs/<id>)")
    return json.loads(path.read_text())
