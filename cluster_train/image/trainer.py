"""The Lightning Trainer a run config describes: strategy, precision, devices, cluster plugins, rank announcements."""
import contextlib
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.plugins.environments import SLURMEnvironment
from pytorch_lightning.plugins.io import AsyncCheckpointIO
from pytorch_lightning.profilers import PassThroughProfiler
from pytorch_lightning.strategies import DeepSpeedStrategy

from cluster_train.shared import config as cfg
from cluster_train.shared.checkpoint_every import interval
from cluster_train.image import trackers
from cluster_train.image.checkpoint_io import AtomicCheckpointIO, atomic_directory_saves, restore_aside
from cluster_train.image.csv_append import AppendingCSVLogger
from cluster_train.image.guard import RunGuard, keep_our_signal_handlers
from cluster_train.image.lsf_environment import LSFHostfileEnvironment
from cluster_train.image.speed import resolved, speed_callbacks
from cluster_train.shared.strategies import STRATEGIES


class AnnounceRanks(Callback):
    """Print where every rank runs, so a job log shows all hosts and the world size."""

    def setup(self, trainer, pl_module, stage):
        print(
            f"[cluster-train] rank {trainer.global_rank}/{trainer.world_size} on host {socket.gethostname()} "
            f"(node {trainer.node_rank}, local rank {trainer.local_rank}, {getattr(stage, 'value', stage)}) "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}",  # which GPU the scheduler gave it
            flush=True,
        )


class NoProfiler(PassThroughProfiler):
    """Lightning's default profiler records nothing, yet wraps each of the ~130 hook calls of a training step in a new
    generator-based context manager; this one hands out one shared no-op context: the same nothing, ~0.8 us a call
    less on a 2-core VM (benchmarks/README.md). A run config sets no profiler."""

    def profile(self, action_name: str):
        return _NOTHING


_NOTHING = contextlib.nullcontext()


def trainer_options(run: cfg.RunConfig) -> dict:
    """Everything the run config decides about a Lightning Trainer, with `auto` precision and layout made concrete
    for this device (cluster_train/image/speed.py); callers add loggers, paths and their own callbacks after ours."""
    accelerator = accelerator_for(run.trainer.accelerator)
    t = resolved(run.trainer, accelerator)
    return dict(
        accelerator=accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=STRATEGIES.build(t.strategy, accelerator=accelerator, trainer=t),
        precision=t.precision,
        max_epochs=t.max_epochs,
        accumulate_grad_batches=t.accumulate_grad_batches,
        gradient_clip_val=t.gradient_clip_val,
        limit_train_batches=t.limit_train_batches,
        limit_val_batches=t.limit_val_batches,
        log_every_n_steps=t.log_every_n_steps,
        plugins=[*cluster_plugins(), checkpoint_io(t)],
        enable_progress_bar=False,  # batch-job logs are files: a progress bar only fills them with carriage returns
        num_sanity_val_steps=0,  # the tasks validate explicitly before training
        profiler=NoProfiler(),
        callbacks=speed_callbacks(t, accelerator),
    )


def build_trainer(run: cfg.RunConfig, out: Path, callbacks=(), **overrides) -> pl.Trainer:
    """`task: classify`'s Trainer: the run's options, its loggers and checkpoints under `out`. `make bench` times this
    same Trainer, adding its clock to `callbacks` and its own data handling in `overrides` (Trainer arguments)."""
    best = ModelCheckpoint(dirpath=out / "checkpoints", filename="best", monitor="val/loss", mode="min",
                           save_top_k=1, enable_version_counter=False)
    options = trainer_options(run)
    ours = options.pop("callbacks")
    return resilient(pl.Trainer(**{
        **options,
        "default_root_dir": out,
        "logger": [AppendingCSVLogger(out, name="", version=""), *trackers.loggers(run, out)],
        "callbacks": [*ours, RunGuard(last_checkpoint(out)), best, keep_last(last_checkpoint(out)),
                      *saves_between(last_checkpoint(out), run.trainer.checkpoint_every), AnnounceRanks(),
                      *trackers.callbacks(run, out), *callbacks],
        **overrides,
    }))


def keep_last(path: Path) -> ModelCheckpoint:
    """Writes `path` (last.ckpt) at every epoch end. Lightning 2.6's save_last=True writes it only in a step that also
    wrote a top-k checkpoint, so a run whose val loss stopped improving would resume from its best epoch, not its
    last; monitor=None with save_top_k=1 keeps the newest. No version counter: a resumed run overwrites its own file
    (Lightning would start last-v1.ckpt and the next segment would resume from the stale one)."""
    return ModelCheckpoint(dirpath=Path(path).parent, filename=Path(path).stem, monitor=None, save_top_k=1,
                           save_on_train_epoch_end=True, enable_version_counter=False)


ASYNC_SAVES = ("single", "ddp")  # rank 0 writes one file through the checkpoint IO plugin: a thread can write it
# DeepSpeed and FSDP save synchronously: every rank writes its own shards through the strategy's saver, a collective
# the plugin's one background thread on rank 0 cannot run


def checkpoint_io(t: cfg.TrainerConfig):
    """Atomic saves (cluster_train/image/checkpoint_io.py); with checkpoint_every, written by a background thread
    where the strategy allows (Lightning's AsyncCheckpointIO clones the tensors first, then the step goes on)."""
    if t.checkpoint_every is not None and t.strategy in ASYNC_SAVES:
        return AsyncCheckpointIO(AtomicCheckpointIO())
    return AtomicCheckpointIO()


def saves_between(path: Path, every) -> list:
    """trainer.checkpoint_every's mid-epoch saves into `path`, the checkpoint the run resumes from: none when off."""
    steps, seconds = interval(every)
    if steps is None and seconds is None:
        return []
    return [SaveBetween(path, steps, seconds)]


class SaveBetween(ModelCheckpoint):
    """Lightning's ModelCheckpoint saving `path` every N training steps or T seconds, at a batch end: the same point
    and state as the time-limit warning's save (RunGuard's RNG and the loader position travel as callback state), so
    a resume from either is the same (metrics rows need no flush: Lightning writes each one to disk as it logs it).
    An epoch's last batch is left to keep_last, which saves after validation."""

    def __init__(self, path: Path, steps, seconds):
        super().__init__(dirpath=Path(path).parent, filename=Path(path).stem, monitor=None, save_top_k=1,
                         every_n_train_steps=steps, save_on_train_epoch_end=True, enable_version_counter=False,
                         train_time_interval=timedelta(seconds=seconds) if seconds else None)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx + 1 < trainer.num_training_batches:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


def last_checkpoint(out: Path) -> Path:
    """Where a run keeps the checkpoint it resumes from (the multi-model tasks: one per model,
    cluster_train/image/tasks/common.py)."""
    return Path(out) / "checkpoints" / "last.ckpt"


def resume_from(path: Path):
    """The ckpt_path for Trainer.fit: `path` when an earlier segment left it, else None (a fresh start)."""
    restore_aside(path)
    return str(path) if Path(path).exists() else None


def resilient(trainer: pl.Trainer) -> pl.Trainer:
    """Our signal handling instead of Lightning's, and directory checkpoints (DeepSpeed) swapped in atomically."""
    keep_our_signal_handlers(trainer)
    if isinstance(trainer.strategy, DeepSpeedStrategy):
        atomic_directory_saves(trainer.strategy)
    return trainer


def cluster_plugins() -> list:
    """Slurm: Lightning's own environment with its auto-requeue off (it would call `scontrol` inside the container,
    which has none; the batch shell requeues). Plain LSF with blaunch Lightning cannot detect
    (cluster_train/image/lsf_environment.py)."""
    if LSFHostfileEnvironment.detect():
        return [LSFHostfileEnvironment()]
    if SLURMEnvironment.detect():
        return [SLURMEnvironment(auto_requeue=False)]
    return []


def accelerator_for(requested: str) -> str:
    if requested == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return requested
