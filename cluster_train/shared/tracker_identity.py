"""What ties a tracker's run to a cluster-train run, torch-free (the image's trainer, cluster_train/image/trackers.py,
and your own command's launcher, cluster_train/image/command_trackers.py, both use it): the run's identity as tags, the
W&B id, each segment as an event, and the tracker run ids kept in the run's output directory (trackers.json) for every
later segment."""
import getpass
import hashlib
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Dict, Optional

from cluster_train.shared.durable import atomic_write_bytes

STATE = "trackers.json"  # in the run's output directory: each tracker's run id, read by every later segment
LOCAL_MLFLOW = "mlruns"  # the embedded MLflow file store, and where an offline run logs


def wandb_id(out: Path, name: str) -> str:
    """The W&B run id, the same in every segment without anyone having to write it first: the run's id, and a digest
    of where it writes (two runs given the same --run-id on two machines stay two W&B runs)."""
    tags = identity(out)
    digest = hashlib.sha256(f"{tags.get('ct.submitted_at', '')}|{out.resolve()}|{name}".encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"{tags['ct.run_id']}-{name}"[:60]).strip("-") + f"-{digest}"


def run_name(out: Path, name: str) -> str:
    return f"{identity(out)['ct.run_id']}/{name}" if name else identity(out)["ct.run_id"]


def identity(out: Path) -> Dict[str, str]:
    """What makes the run reproducible, from its manifest (written at submission) and the job's environment; a run
    started without run-cluster (python -m train fit) has only its directory's name."""
    run_dir = Path(os.environ.get("CT_RUN_DIR") or out)
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text()) if path.is_file() else {}
    found = {
        "ct.run_id": manifest.get("run_id") or run_dir.name,
        "ct.submitted_at": manifest.get("submitted_at"),
        "ct.cluster": manifest.get("cluster"),
        "ct.profile": manifest.get("profile"),
        "ct.image_sha256": os.environ.get("CT_IMAGE_SHA256") or (manifest.get("image") or {}).get("sha256"),
        "ct.data_sha256": (manifest.get("data") or {}).get("sha256"),
        "ct.code_commit": (manifest.get("git") or {}).get("commit"),
        "ct.code_dirty": (manifest.get("git") or {}).get("dirty"),
        "ct.code_sha256": (manifest.get("code") or {}).get("sha256"),
    }
    return {key: str(value) for key, value in found.items() if value not in (None, "")}


def mlflow_user() -> Dict[str, str]:
    """MLflow's user tag (and the run's user_id in meta.yaml) as the system user the job runs as: left to MLflow it is
    MLFLOW_TRACKING_USERNAME where that is set, a credential, which no run directory (nor a server it is synced to)
    may hold."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER: the uid names the user
        user = str(os.getuid())
    return {"mlflow.user": user}


def state_key(tracker: str, name: str) -> str:
    return f"{tracker}/{name}" if name else tracker


def read_state(out: Path) -> Dict[str, Any]:
    path = Path(out) / STATE
    return json.loads(path.read_text()) if path.is_file() else {}


def write_state(out: Path, key: str, value: Dict[str, Any]) -> None:
    """One tracker's entry, written atomically (a segment killed mid-write leaves the old file)."""
    state = {**read_state(out), key: value}
    atomic_write_bytes(Path(out) / STATE, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode())


def segment_event(step: Optional[int]) -> Dict[str, Any]:
    """This segment (the job script's count, CT_SEGMENT) and where it starts: the step its checkpoint restored (None:
    your own code's, which cluster-train does not see)."""
    return {"segment": int(os.environ.get("CT_SEGMENT") or 1), "step": None if step is None else int(step),
            "host": socket.gethostname(),
            "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("LSB_JOBID") or "",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def mlflow_uri(run, out: Path) -> str:
    """The server, or the file store in the run directory (no server given, or the nodes cannot reach it)."""
    if run.tracker.mlflow_uri and not run.tracker.offline:
        return run.tracker.mlflow_uri
    # MLflow 3 refuses its file store unless asked: it is the one store its skinny client writes without a
    # database library, and `bin/run-cluster sync` moves the run into a server's database afterwards
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (out / LOCAL_MLFLOW).resolve().as_uri()


def mark_mlflow_segment(client, run_id: str, out: Path, event: Dict[str, Any], continued: bool) -> None:
    """A segment's start on the MLflow run: RUNNING again (an earlier segment's end marked it finished), the run's
    identity as tags, the segment as the event tag ct.segment.N."""
    if continued:
        client.update_run(run_id, status="RUNNING")
    for name, value in identity(out).items():
        client.set_tag(run_id, name, value)
    client.set_tag(run_id, f"ct.segment.{event['segment']}", json.dumps(event))
