"""Pieces the multi-model tasks share: a plain single-process Trainer and per-epoch history recording."""
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import CSVLogger

from train.config import RunConfig
from train.fit import accelerator_for, cluster_plugins
from train.strategies import STRATEGIES


def trainer(run: RunConfig, out: Path, log_name: str, callbacks=(), max_epochs=None, extra_loggers=()) -> pl.Trainer:
    t = run.trainer
    accelerator = accelerator_for(t.accelerator)
    return pl.Trainer(
        default_root_dir=out,
        accelerator=accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=STRATEGIES.build(t.strategy, accelerator=accelerator, trainer=t),
        precision=t.precision,
        max_epochs=max_epochs or t.max_epochs,
        gradient_clip_val=t.gradient_clip_val,
        limit_train_batches=t.limit_train_batches,
        limit_val_batches=t.limit_val_batches,
        log_every_n_steps=t.log_every_n_steps,
        logger=[CSVLogger(out / "logs", name=log_name, version=""), *extra_loggers],
        callbacks=list(callbacks),
        enable_checkpointing=False,  # these tasks write the seeds' own file names (see their callbacks)
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        plugins=cluster_plugins(),
    )


class EpochHistory(Callback):
    """Per-epoch train loss (mean over batches) and the logged validation metrics, as plain floats."""

    def __init__(self):
        self.history = {"epoch": [], "train_loss": [], "val_loss": [], "val_acc": []}
        self._losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self._losses.append(float(loss))

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking or not self._losses:
            return
        metrics = trainer.callback_metrics
        self.history["epoch"].append(trainer.current_epoch)
        self.history["train_loss"].append(sum(self._losses) / len(self._losses))
        self.history["val_loss"].append(float(metrics["val/loss"]))
        self.history["val_acc"].append(float(metrics["val/acc"]))
        self._losses = []
        self.on_epoch_recorded(trainer, pl_module)

    def on_epoch_recorded(self, trainer, pl_module):
        """Subclasses save files here, after the epoch's numbers are in self.history."""
