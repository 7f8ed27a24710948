"""The experiment trackers a run logs to besides metrics.csv (`tracker:`, train/tracker_config.py): Lightning's own
TensorBoardLogger, MLFlowLogger and WandbLogger, given cluster-train's run identity.

One tracked run per cluster-train run, whatever the number of segments: the tracker's run id is kept in the run
directory (trackers.json) and every segment continues that run at the global step its checkpoint restored (MLflow:
the same run_id; W&B: the same id with resume="allow"). The run's identity (run id, cluster, profile, image and data
digests, code commit) goes in as tags, the resolved config as parameters, each segment's start as an event.
"""
import hashlib
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Dict

from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from train import config as cfg
from train.tracker_config import CREDENTIALS

STATE = "trackers.json"  # in the run's output directory: each tracker's run id, read by every later segment
LOCAL_MLFLOW = "mlruns"  # the embedded MLflow file store, and where an offline run logs


def loggers(run: cfg.RunConfig, out: Path, name: str = "", project: str = "", tensorboard: bool = True) -> list:
    """The loggers `run.tracker` names, for the Trainer writing into `out`. `name`: one model's log of a multi-model
    task (its own tracked run); `project`: the task's default MLflow experiment / W&B project (else the run's name);
    `tensorboard`: False where a task writes no TensorBoard files."""
    use, out = run.tracker.use, Path(out)
    made: list = []
    if tensorboard and "tensorboard" in use:
        made.append(TensorBoardLogger(out, name="tensorboard", version=""))
    if "mlflow" in use:
        made.append(mlflow_logger(run, out, name, project))
    if "wandb" in use:
        made.append(wandb_logger(run, out, name, project))
    return made


def callbacks(run: cfg.RunConfig, out: Path, name: str = "") -> list:
    """What ties the trackers' runs to this run: its id kept, its identity and config logged, each segment recorded."""
    return [TrackedRun(run, Path(out), name)] if {"mlflow", "wandb"} & set(run.tracker.use) else []


def mlflow_logger(run: cfg.RunConfig, out: Path, name: str, project: str):
    uri = mlflow_uri(run, out)
    saved = read_state(out).get(state_key("mlflow", name), {})
    run_id = saved.get("run_id") if saved.get("tracking_uri") == uri else None  # a run in another store is not ours
    return MLFlowLogger(experiment_name=run.tracker.experiment or project or run.name, run_name=run_name(out, name),
                        tracking_uri=uri, tags=identity(out), run_id=run_id)


def mlflow_uri(run: cfg.RunConfig, out: Path) -> str:
    """The server, or the file store in the run directory (no server given, or the nodes cannot reach it)."""
    if run.tracker.mlflow_uri and not run.tracker.offline:
        return run.tracker.mlflow_uri
    # MLflow 3 refuses its file store unless asked: it is the one store its skinny client writes without a
    # database library, and `bin/run-cluster sync` moves the run into a server's database afterwards
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (out / LOCAL_MLFLOW).resolve().as_uri()


def wandb_logger(run: cfg.RunConfig, out: Path, name: str, project: str):
    import wandb

    run_id = wandb_id(out, name)
    if wandb.run is not None and wandb.run.id != run_id:  # a multi-model task's previous model: WandbLogger would
        wandb.finish()                                     # log this one into it
    return StepWandbLogger(name=run_name(out, name), project=run.tracker.experiment or project or run.name,
                           entity=run.tracker.wandb_entity or None, id=run_id, resume="allow", save_dir=str(out),
                           offline=run.tracker.offline)


class StepWandbLogger(WandbLogger):
    """Lightning's WandbLogger with W&B's own step (_step) set to the trainer's global step. W&B counts its step
    from 0 again in each offline segment's directory (offline, it cannot ask the server where the run stopped), so a
    resumed offline run would repeat its steps when synced; the global step goes on from the checkpoint's."""

    @rank_zero_only
    def log_metrics(self, metrics, step=None) -> None:
        if step is None:
            return super().log_metrics(metrics, step)
        self.experiment.log({**metrics, "trainer/global_step": step}, step=step)


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


def state_key(tracker: str, name: str) -> str:
    return f"{tracker}/{name}" if name else tracker


def read_state(out: Path) -> Dict[str, Any]:
    path = Path(out) / STATE
    return json.loads(path.read_text()) if path.is_file() else {}


def write_state(out: Path, key: str, value: Dict[str, Any]) -> None:
    """One tracker's entry, written atomically (a segment killed mid-write leaves the old file)."""
    state = {**read_state(out), key: value}
    tmp = Path(out) / f".{STATE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, Path(out) / STATE)


class TrackedRun(Callback):
    """On rank 0: each tracker's run id kept as soon as the run exists (the first validation, before training, may
    create it), then at each segment's start its identity, config and the segment. Other ranks log nothing, so they
    drop the trackers' credentials the job forwarded."""

    def __init__(self, run: cfg.RunConfig, out: Path, name: str):
        self.run, self.out, self.name = run, out, name
        self.continued: Dict[str, bool] = {}  # per tracker: did an earlier segment start this run?

    def setup(self, trainer, pl_module, stage):
        if trainer.global_rank != 0:
            for names in CREDENTIALS.values():
                for variable in names:
                    os.environ.pop(variable, None)
            return
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                self._keep(state_key("mlflow", self.name), logger.run_id, tracking_uri=logger._tracking_uri,
                           experiment_id=logger.experiment_id)
            elif isinstance(logger, WandbLogger):
                experiment = logger.experiment
                self._keep(state_key("wandb", self.name), experiment.id, project=experiment.project,
                           dir=experiment.dir, offline=bool(self.run.tracker.offline))

    def _keep(self, key: str, run_id: str, **facts) -> None:
        before = read_state(self.out).get(key, {})
        self.continued.setdefault(key, (before.get("run_id") or before.get("id")) == run_id)
        write_state(self.out, key, {"run_id" if key.startswith("mlflow") else "id": run_id, **facts})

    def on_train_start(self, trainer, pl_module):  # after the checkpoint restored the step
        if trainer.global_rank != 0:
            return
        event = segment_event(trainer.global_step)
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger):
                self._mlflow(logger, event)
            elif isinstance(logger, WandbLogger):  # StepWandbLogger
                self._wandb(logger, event)

    def _mlflow(self, logger, event: Dict[str, Any]) -> None:
        client, run_id = logger.experiment, logger.run_id
        if self.continued.get(state_key("mlflow", self.name)):  # an earlier segment's end marked it finished
            client.update_run(run_id, status="RUNNING")
        else:  # params once: MLflow refuses a changed value, and a resume may raise trainer.max_epochs
            logger.log_hyperparams(cfg.to_dict(self.run))
        for name, value in identity(self.out).items():
            client.set_tag(run_id, name, value)
        client.set_tag(run_id, f"ct.segment.{event['segment']}", json.dumps(event))

    def _wandb(self, logger, event: Dict[str, Any]) -> None:
        experiment = logger.experiment
        experiment.config.update({"cluster_train": identity(self.out), **cfg.to_dict(self.run)},
                                 allow_val_change=True)
        experiment.log({"cluster_train/segment": event["segment"], "trainer/global_step": event["step"]},
                       step=event["step"])


def segment_event(step: int) -> Dict[str, Any]:
    """This segment (the job script's count, CT_SEGMENT) and where it starts: the step its checkpoint restored."""
    return {"segment": int(os.environ.get("CT_SEGMENT") or 1), "step": int(step), "host": socket.gethostname(),
            "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("LSB_JOBID") or "",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

