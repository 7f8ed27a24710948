"""The experiment trackers a run logs to besides metrics.csv (`tracker:`, cluster_train/shared/tracker_config.py):
Lightning's own TensorBoardLogger, MLFlowLogger and WandbLogger, given cluster-train's run identity.

One tracked run per cluster-train run, whatever the number of segments: the tracker's run id is kept in the run
directory (trackers.json) and every segment continues that run at the global step its checkpoint restored (MLflow:
the same run_id; W&B: the same id with resume="allow"). The run's identity (run id, cluster, profile, image and data
digests, code commit) goes in as tags, the resolved config as parameters, each segment's start as an event.
"""
import os
from pathlib import Path
from typing import Any, Dict

from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from cluster_train.shared import config as cfg
from cluster_train.shared import wandb_offline
from cluster_train.shared.tracker_config import CREDENTIALS
from cluster_train.shared.tracker_identity import (identity, mark_mlflow_segment, mlflow_uri, mlflow_user, read_state,
                                                   run_name,
                                    segment_event, state_key, wandb_id, write_state)


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
                        tracking_uri=uri, tags={**identity(out), **mlflow_user()}, run_id=run_id)


def wandb_logger(run: cfg.RunConfig, out: Path, name: str, project: str):
    import wandb

    run_id = wandb_id(out, name)
    if run.tracker.offline and rank_zero_only.rank == 0:  # a segment killed before its own end left its directory
        wandb_offline.fold(out / "wandb", run_id)
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


def finish(run: cfg.RunConfig, exit_code: int) -> None:
    """A segment's end, on rank 0 (the only rank that logs): W&B's run closed with the process's exit code, its log
    complete on disk, then its offline directories folded into one (cluster_train/shared/wandb_offline.py). A segment
    killed before this is folded by the next segment's start, or by `run-cluster sync`."""
    if "wandb" not in run.tracker.use or rank_zero_only.rank != 0:
        return
    import wandb

    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)
    if run.tracker.offline:
        wait_for_wandb_logs(exit_code)
        for key, entry in read_state(Path(run.output_dir)).items():
            if key.split("/")[0] == "wandb":
                wandb_offline.fold(Path(run.output_dir) / "wandb", entry["id"])


def wait_for_wandb_logs(exit_code: int) -> None:
    """Return once wandb-core has written this process's runs' logs whole. wandb.finish() does not wait for that: the
    service keeps a log's last (partial) 32 KiB block, the exit record in it, in memory until it closes the run's stream
    (its writer's Close; offline nothing flushes sooner), and finish() only asks for that close, last, without waiting
    (ServiceConnection.inform_finish publishes). A fold right after it could read the log without its tail: under load
    the folded log had no exit record. wandb.teardown() (what W&B's atexit hook does at the process's end anyway) has
    the service close every stream, after that finish, and waits for its process to exit (wandb 0.24 and 0.31 alike)."""
    import wandb

    try:
        wandb.teardown(exit_code)
    except SystemExit as crashed:  # W&B's word for wandb-core itself exiting non-zero: the segment's own code stands
        print(f"[cluster-train] wandb-core exited with {crashed.code}: the W&B log may lack its end", flush=True)


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
        continued = self.continued.get(state_key("mlflow", self.name))  # an earlier segment started this run
        if not continued:  # params once: MLflow refuses a changed value, and a resume may raise trainer.max_epochs
            logger.log_hyperparams(cfg.to_dict(self.run))
        mark_mlflow_segment(logger.experiment, logger.run_id, self.out, event, continued)

    def _wandb(self, logger, event: Dict[str, Any]) -> None:
        experiment = logger.experiment
        experiment.config.update({"cluster_train": identity(self.out), **cfg.to_dict(self.run)},
                                 allow_val_change=True)
        experiment.log({"cluster_train/segment": event["segment"], "trainer/global_step": event["step"]},
                       step=event["step"])
