"""The Lightning Trainer a run config describes: strategy, precision, devices, cluster plugins, rank announcements."""
import os
import socket
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

from train import config as cfg
from train.lsf_environment import LSFHostfileEnvironment
from train.strategies import STRATEGIES


class AnnounceRanks(Callback):
    """Print where every rank runs, so a job log shows all hosts and the world size."""

    def setup(self, trainer, pl_module, stage):
        print(
            f"[cluster-train] rank {trainer.global_rank}/{trainer.world_size} on host {socket.gethostname()} "
            f"(node {trainer.node_rank}, local rank {trainer.local_rank}, {getattr(stage, 'value', stage)}) "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}",  # which GPU the scheduler gave it
            flush=True,
        )


def trainer_options(run: cfg.RunConfig) -> dict:
    """Everything the run config decides about a Lightning Trainer; callers add loggers, callbacks and paths."""
    t = run.trainer
    accelerator = accelerator_for(t.accelerator)
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
        plugins=cluster_plugins(),
        enable_progress_bar=False,  # batch-job logs are files: a progress bar only fills them with carriage returns
        num_sanity_val_steps=0,  # the tasks validate explicitly before training
    )


def build_trainer(run: cfg.RunConfig, out: Path) -> pl.Trainer:
    checkpoints = ModelCheckpoint(
        dirpath=out / "checkpoints", filename="best", monitor="val/loss", mode="min", save_top_k=1, save_last=True
    )
    return pl.Trainer(
        **trainer_options(run),
        default_root_dir=out,
        logger=[CSVLogger(out, name="", version=""), TensorBoardLogger(out, name="tensorboard", version="")],
        callbacks=[checkpoints, AnnounceRanks()],
    )


def cluster_plugins():
    """Lightning detects Slurm by itself; plain LSF with blaunch it cannot (see train/lsf_environment.py)."""
    return [LSFHostfileEnvironment()] if LSFHostfileEnvironment.detect() else None


def accelerator_for(requested: str) -> str:
    if requested == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    return requested
