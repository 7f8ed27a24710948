"""Pieces the tasks share: a plain Trainer for the multi-model tasks, per-epoch history recording, and the one ending
that writes results.json and prints the `[cluster-train] results:` line.

Resume of a multi-model task: each model (log_name) keeps its own checkpoints/<log_name>/last.ckpt (written at every
epoch end, and on a stop request) and resumes from it (`fit_resuming`); a model that finished gets a done-marker,
checkpoints/done/<log_name>.json (`mark_done`), written after all its seed files, and is skipped on the next segment.
"""
import json
import os
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from cluster_train.image import trackers
from cluster_train.shared.durable import atomic_write_bytes
from cluster_train.shared.config import RunConfig
from cluster_train.image.csv_append import AppendingCSVLogger
from cluster_train.shared.data import build as build_data
from cluster_train.shared.errors import UserError
from cluster_train.image.guard import RunGuard
from cluster_train.image.speed import speed_facts
from cluster_train.image.trainer import (AnnounceRanks, keep_last, resilient, resume_from, saves_between,
                                         trainer_options)


def trainer(run: RunConfig, out: Path, log_name: str, callbacks=(), max_epochs=None, project: str = "") -> pl.Trainer:
    """One model's Trainer; its tracked run (cluster_train/image/trackers.py) is named after `log_name`, in the task's
    `project` unless tracker.experiment names one. No TensorBoard files: these tasks keep their seeds' CSV logs."""
    options = trainer_options(run)
    options["max_epochs"] = max_epochs or options["max_epochs"]
    ours = options.pop("callbacks")
    last = model_checkpoint(out, log_name)  # the seeds' own files come from the tasks' callbacks, this one is resume's
    return resilient(pl.Trainer(
        **options,
        default_root_dir=out,
        logger=[AppendingCSVLogger(out / "logs", name=log_name, version=""),
                *trackers.loggers(run, out, log_name, project, tensorboard=False)],
        callbacks=[*ours, *callbacks, RunGuard(last), keep_last(last),
                   *saves_between(last, run.trainer.checkpoint_every), AnnounceRanks(),  # Announce: where ranks ran
                   *trackers.callbacks(run, out, log_name)],
    ))


def seeded_data(run: RunConfig, task: str, data_name: str):
    """The data module of a task that reads one data set only, after seeding every generator (workers too)."""
    if run.data.name != data_name:
        raise UserError(f"task {task} reads data.name: {data_name}, not {run.data.name!r}")
    pl.seed_everything(run.seed, workers=True)
    return build_data(run.data)


def fit_validated(run: RunConfig, module, data, log_name: str):
    """Validate, fit (resuming), validate again: the Trainer, the final validation metrics, and the fields every
    single-model task's results.json carries (losses before and after, epochs, world size, GPU, speed)."""
    out = Path(run.output_dir)
    fitter = trainer(run, out, log_name)
    started = time.time()
    last = resume_from(model_checkpoint(out, log_name))
    initial = initial_validation(fitter, module, data, model_checkpoint(out, log_name), resuming=last is not None)
    fitter.fit(module, datamodule=data, ckpt_path=last)
    final = fitter.validate(module, datamodule=data, verbose=False)[0]
    facts = {"initial_val_loss": initial["val/loss"], "final_val_loss": final["val/loss"],
             "epochs": fitter.current_epoch, "world_size": fitter.world_size,
             "duration_s": round(time.time() - started, 1), "torch": torch.__version__, **gpu_facts(),
             **speed_facts(fitter, run.data.num_workers)}
    return fitter, final, facts


def initial_validation(fitter: pl.Trainer, module, data, last: Path, resuming: bool) -> dict:
    """The metrics before training: measured in a run's first segment and kept beside its last.ckpt, read back by the
    later ones (validating again would add a metrics.csv row that the same run without a stop does not have)."""
    record = Path(last).parent / "initial_validation.json"
    if resuming and record.is_file():
        return json.loads(record.read_text())
    metrics = fitter.validate(module, datamodule=data, verbose=False)[0]
    if fitter.is_global_zero:
        record.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(record, json.dumps(metrics).encode())
    return metrics


def gpu_facts() -> dict:
    """What the run trained on: GPU model, torch's CUDA, and the node's driver (the job read it from nvidia-smi)."""
    cuda = torch.cuda.is_available()
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None, "cuda": torch.version.cuda,
            "driver": os.environ.get("CT_DRIVER_VERSION")}


def model_checkpoint(out: Path, log_name: str) -> Path:
    return Path(out) / "checkpoints" / log_name / "last.ckpt"


def fit_resuming(fitter: pl.Trainer, module, datamodule, out: Path, log_name: str) -> None:
    """Fit, from the model's own last.ckpt when an earlier segment left one."""
    fitter.fit(module, datamodule=datamodule, ckpt_path=resume_from(model_checkpoint(out, log_name)))


def done_marker(out: Path, log_name: str) -> Path:
    return Path(out) / "checkpoints" / "done" / f"{log_name}.json"


def mark_done(out: Path, log_name: str, record: dict, write: bool = True) -> None:
    """Written (rank 0) after every file the model's seed expects: the next segment skips this model."""
    if write:
        atomic_write_bytes(done_marker(out, log_name), (json.dumps(record) + "\n").encode())


def finished(out: Path, log_name: str, files=()) -> dict:
    """The done-marker's record when the model finished in an earlier segment and its files are all there, else {}."""
    marker = done_marker(out, log_name)
    if not marker.is_file() or not all(Path(f).is_file() for f in files):
        return {}
    print(f"[cluster-train] {log_name}: finished in an earlier segment, skipped", flush=True)
    return json.loads(marker.read_text())


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

    def state_dict(self):  # in the model's last.ckpt: a resumed model's history starts at its first epoch
        return {"history": self.history, "best": getattr(self, "best", None)}

    def load_state_dict(self, state_dict):
        self.history = {k: list(v) for k, v in state_dict["history"].items()}
        if state_dict.get("best") is not None:
            self.best = state_dict["best"]


def write_results(out: Path, record: dict, write: bool = True) -> dict:
    """Every task's ending: results.json in the run's output_dir and one log line (on rank 0 only: write=False
    elsewhere); returns the record. It always carries host_memory at its top, where preflight reads it."""
    record = {**record, **models_host_memory(record)}
    if write:
        (Path(out) / "results.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"[cluster-train] results: {json.dumps(record)}", flush=True)
    return record


def models_host_memory(record: dict) -> dict:
    """A multi-model task's host_memory: each model's peaks (speed.<model>.host_memory), the largest of them; {} for
    a task that records its one Trainer's at the top, or trained no model in this segment."""
    each = [s["host_memory"] for s in record.get("speed", {}).values() if "host_memory" in s]
    if "host_memory" in record or not each:
        return {}
    workers = [m["worker_peak_gb"] for m in each if m["worker_peak_gb"] is not None]
    return {"host_memory": {"measure": "pss", "num_workers": each[0]["num_workers"],
                            "rank_peak_gb": max(m["rank_peak_gb"] for m in each),
                            "worker_peak_gb": max(workers) if workers else None,
                            "of": "the largest of speed.<model>.host_memory"}}
