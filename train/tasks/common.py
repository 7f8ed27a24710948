"""Pieces the tasks share: a plain Trainer for the multi-model tasks, per-epoch history recording, and the one ending
that writes results.json and prints the `[cluster-train] results:` line."""
import json
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import CSVLogger

from train.config import RunConfig
from train.trainer import AnnounceRanks, trainer_options


def trainer(run: RunConfig, out: Path, log_name: str, callbacks=(), max_epochs=None, extra_loggers=()) -> pl.Trainer:
    options = trainer_options(run)
    options["max_epochs"] = max_epochs or options["max_epochs"]
    return pl.Trainer(
        **options,
        default_root_dir=out,
        logger=[CSVLogger(out / "logs", name=log_name, version=""), *extra_loggers],
        callbacks=[*callbacks, AnnounceRanks()],  # every job log shows where each rank ran, and on which GPU
        enable_checkpointing=False,  # these tasks write the seeds' own file names (see their callbacks)
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


def write_results(out: Path, record: dict, write: bool = True) -> dict:
    """Every task's ending: results.json in the run's output_dir and one log line (on rank 0 only: write=False
    elsewhere); returns the record."""
    if write:
        (Path(out) / "results.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"[cluster-train] results: {json.dumps(record)}", flush=True)
    return record
