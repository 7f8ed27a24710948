"""`tracker:` of a run config: which experiment trackers a run
logs to and where (cluster_train/image/trackers.py builds them).

Torch-free, so the host checks it before anything is queued. `tracker: mlflow`, `tracker: [mlflow, wandb]` and
`tracker: {use: [mlflow], mlflow_uri: ...}` say the same thing in growing detail; metrics.csv is always written.
"""
from dataclasses import dataclass, field
from typing import Any, List
from urllib.parse import urlsplit

from cluster_train.shared.errors import UserError
from cluster_train.shared.registry import unknown_name

TRACKERS = ("tensorboard", "mlflow", "wandb")
MLFLOW_SCHEMES = ("http", "https", "file")
# The credentials each tracker's client reads from the environment: forwarded into the container by name (never by
# value) to the ranks that log, and the names a run directory must never hold the values of.
CREDENTIALS = {
    "mlflow": ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"),
    "wandb": ("WANDB_API_KEY",),
}


@dataclass
class TrackerConfig:
    use: List[str] = field(default_factory=lambda: ["tensorboard"])  # any of tensorboard, mlflow, wandb
    # MLflow: a tracking server (http://host:5000; its credentials come from MLFLOW_TRACKING_USERNAME and _PASSWORD
    # or _TOKEN in the submitting environment); "": a file store in the run directory (mlruns/)
    mlflow_uri: str = ""
    experiment: str = ""  # the MLflow experiment and the W&B project; "": the run config's name
    wandb_entity: str = ""  # the W&B team or user; "": the API key's default
    # the compute nodes cannot reach the tracker: log into the run directory (MLflow: mlruns/, W&B: wandb/) and
    # upload from the login node with `bin/run-cluster sync runs/<id>`
    offline: bool = False


def normalize(raw: Any) -> Any:
    """`tracker: NAME` or `tracker: [NAMES]` as the mapping `{use: [...]}`, and `use: NAME` as a one-item list, so
    that every spelling reaches the typed config the same way."""
    if isinstance(raw, (str, list, tuple)):
        raw = {"use": raw}
    if isinstance(raw, dict) and isinstance(raw.get("use"), str):
        raw = {**raw, "use": [name.strip() for name in raw["use"].split(",") if name.strip()]}
    return raw


def check(tracker: TrackerConfig) -> None:
    """Every tracker name known, and an MLflow URI the client can use that holds no password."""
    for name in tracker.use:
        if name not in TRACKERS:
            raise UserError(unknown_name("tracker", name, list(TRACKERS)))
    uri = tracker.mlflow_uri
    if not uri:
        return
    parts = urlsplit(uri)
    if parts.scheme not in MLFLOW_SCHEMES:
        raise UserError(f"tracker.mlflow_uri {uri[:80]!r} must start with one of {', '.join(MLFLOW_SCHEMES)}:// "
                        "(a tracking server, or file:// for a file store)")
    if parts.password or parts.username:
        raise UserError("tracker.mlflow_uri holds a user name or password, which would be written into the run's "
                        "config; remove it and export MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD instead")
    if parts.scheme != "file" and not parts.hostname:
        raise UserError(f"tracker.mlflow_uri {uri[:80]!r} names no host; write it like http://mlflow.example.org:5000")


def credentials(tracker: TrackerConfig) -> List[str]:
    """The credential variables the run's trackers read, by name."""
    return [name for kind in tracker.use for name in CREDENTIALS.get(kind, ())]
