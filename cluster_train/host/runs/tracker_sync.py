"""`run-cluster sync runs/<id>`: upload what a run's trackers logged into its run directory (`tracker.offline`, for
compute nodes that cannot reach the tracker) from a machine that can, the login node; `status` says what is synced.

MLflow: the run's file store (mlruns/) is copied into the server `tracker.mlflow_uri` names, as one run whatever the
number of segments; syncing again sends only the metric points added since (trackers_synced.json keeps the count).
W&B: the run's one offline directory (wandb/offline-run-*-<id>, its segments folded:
cluster_train/shared/wandb_offline.py) goes to `wandb sync`; it is synced while its log has not grown since.
Credentials come from this machine's environment (MLFLOW_TRACKING_*, WANDB_API_KEY), as the clients read them.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import yaml

from cluster_train.shared import tracker_identity as tracked
from cluster_train.shared import wandb_offline
from cluster_train.shared.errors import UserError
from cluster_train.host import project, runs
from cluster_train.host.images import store
from cluster_train.host.runs import segments
from cluster_train.host.usage import Parser

SYNCED = "trackers_synced.json"  # beside trackers.json: where each tracked run went and how much of it


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster sync")
    p.add_argument("run_dir", type=runs.find, help="a run's directory, or its id")
    run_dir = p.parse_args(argv).run_dir.resolve()
    runs.read_manifest(run_dir)  # /etc, a run's logs/, another tool's manifest: refused as every command refuses them
    found = segments.read(run_dir)
    running = bool(found) and not found[-1].how  # a segment's process still writes its W&B directory
    done = [line for out in tracked_dirs(run_dir) for line in sync_dir(out, running)]
    if not done:
        raise UserError(f"{run_dir} logged nothing offline to upload (tracker.offline is off, or no segment ran)")
    print("\n".join(done))
    return 0


def tracked_dirs(run_dir: Path) -> List[Path]:
    """The run's directory and each packed task's: where a Trainer kept trackers.json."""
    return [d for d in [run_dir, *sorted(run_dir.glob("task-*"))] if (d / tracked.STATE).is_file()]


def sync_dir(out: Path, running: bool = False) -> List[str]:
    target = mlflow_target(out)
    lines = []
    for key, entry in tracked.read_state(out).items():
        if key.split("/")[0] == "mlflow" and entry.get("tracking_uri", "").startswith("file:"):
            lines.append(sync_mlflow(out, key, entry, target) if target else
                         f"{key}: kept in {entry['tracking_uri']} (no tracker.mlflow_uri to upload to)")
        elif key.split("/")[0] == "wandb" and entry.get("offline"):
            lines.append(sync_wandb(out, key, entry, running))
    return lines


def mlflow_target(out: Path) -> str:
    """The MLflow server the run's config names ("" for the run directory's own store)."""
    config = yaml.safe_load((out / "config.yaml").read_text()) if (out / "config.yaml").is_file() else {}
    return ((config or {}).get("tracker") or {}).get("mlflow_uri") or ""


def mlflow_clients(source: str, target: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError(f"sync needs MLflow's client, which this Python ({sys.executable}) lacks: "
                        f"{with_clients('mlflow-skinny')}") from None
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the run's own store (cluster_train/image/trackers.py)
    return MlflowClient(source), MlflowClient(target)


def with_clients(package: str) -> str:
    """The fix for a missing tracker client: the checkout's virtual environment (make venv) has both, where it is
    there; else the package, installed for this user."""
    venv = project.ROOT / ".venv" / "bin"
    if (venv / "python").is_file():
        return f"run it with the checkout's Python, which has both: {venv / 'python'} bin/run-cluster sync runs/<id>"
    return f"install it: python3 -m pip install --user {package}"


def sync_mlflow(out: Path, key: str, entry: Dict[str, Any], target: str) -> str:
    """One tracked run into the server: created there once, then every tag, the params once, the new metric points."""
    src, dst = mlflow_clients(entry["tracking_uri"], target)
    run = src.get_run(entry["run_id"])
    record = read_synced(out).get(key) or {}
    if record.get("target") != target:  # never sent there: a new run on that server
        name = src.get_experiment(run.info.experiment_id).name
        found = dst.get_experiment_by_name(name)
        experiment = found.experiment_id if found else dst.create_experiment(name)
        created = dst.create_run(experiment, start_time=run.info.start_time, run_name=run.info.run_name)
        record = {"target": target, "run_id": created.info.run_id, "sent": {}}
        params = list(run.data.params.items())
        for i in range(0, len(params), 100):  # MLflow's most params a call
            dst.log_batch(record["run_id"], params=[param(k, v) for k, v in params[i:i + 100]])
    for name, value in run.data.tags.items():
        dst.set_tag(record["run_id"], name, value)
    sent = sum(send_metric(src, dst, entry["run_id"], record, name) for name in run.data.metrics)
    dst.update_run(record["run_id"], status=run.info.status)
    write_synced(out, key, {**record, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return f"{key}: run {entry['run_id']} -> {target} run {record['run_id']}, {sent} new metric point(s)"


def send_metric(src, dst, run_id: str, record: Dict[str, Any], name: str) -> int:
    """The points of one metric not sent before, in the order they were logged; how many."""
    history = src.get_metric_history(run_id, name)
    new = history[record["sent"].get(name, 0):]
    for i in range(0, len(new), 1000):  # MLflow's most metrics a call
        dst.log_batch(record["run_id"], metrics=new[i:i + 1000])
    record["sent"][name] = len(history)
    return len(new)


def param(key: str, value: str):
    from mlflow.entities import Param

    return Param(key, value)


def sync_wandb(out: Path, key: str, entry: Dict[str, Any], running: bool = False) -> str:
    """The W&B run's one offline directory (its segments folded first, if the job could not; a running segment's
    directory is left to its job) to `wandb sync`."""
    exe = shutil.which("wandb") or shutil.which("wandb", path=str(Path(sys.executable).parent))  # a venv's own
    if exe is None:
        raise UserError(f"sync needs W&B's client, which is not on PATH: {with_clients('wandb')}")
    folded = wandb_offline.fold(out / "wandb", entry["id"], leave_last=running)
    if folded is None:
        return f"{key}: run {entry['id']} has no offline directory yet"
    if wandb_synced(out, key, entry):
        return f"{key}: run {entry['id']}, {folded.relative_to(out)} already synced"
    done = subprocess.run([exe, "sync", str(folded)], capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"wandb sync failed for {key}: {(done.stderr or done.stdout).strip()[-300:]}")
    log = folded / f"run-{entry['id']}.wandb"
    write_synced(out, key, {"log": str(log.relative_to(out)), "bytes": log.stat().st_size,
                            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return f"{key}: run {entry['id']}, {folded.relative_to(out)} synced"


def wandb_synced(out: Path, key: str, entry: Dict[str, Any]) -> bool:
    """Synced: one directory, its log as long as when `sync` sent it (a segment folded in since makes it longer; a
    segment the job could not fold is a second directory)."""
    record, dirs = read_synced(out).get(key) or {}, wandb_offline.segment_dirs(out / "wandb", entry["id"])
    log = dirs[0] / f"run-{entry['id']}.wandb" if len(dirs) == 1 else None
    return bool(log and log.is_file() and record.get("bytes") == log.stat().st_size)


def read_synced(out: Path) -> Dict[str, Any]:
    path = out / SYNCED
    return json.loads(path.read_text()) if path.is_file() else {}


def write_synced(out: Path, key: str, value: Dict[str, Any]) -> None:
    store.atomic_write(out / SYNCED, json.dumps({**read_synced(out), key: value}, indent=2, sort_keys=True) + "\n")


def status_lines(run_dir: Path) -> List[str]:
    """For `status`: each tracked run, where it logs, and for an offline one whether it is synced."""
    lines = []
    for out in tracked_dirs(run_dir):
        synced, target = read_synced(out), mlflow_target(out)
        for key, entry in tracked.read_state(out).items():
            local = entry.get("tracking_uri", "").startswith("file:")
            where = entry.get("tracking_uri") or f"W&B project {entry.get('project')}"
            done = wandb_synced(out, key, entry) if key.split("/")[0] == "wandb" else key in synced
            if not (entry.get("offline") or (local and target)):
                state = "in the run directory" if local else "logged online"
            else:
                state = f"synced {synced[key]['at']}" if done else f"not synced: run-cluster sync {run_dir}"
            lines.append(f"tracker {key}: run {entry.get('run_id') or entry.get('id')} ({where}), {state}")
    return lines
