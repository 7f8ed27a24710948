"""`task: classify` (the default): one registered model trained on one data set.

Writes under output_dir: checkpoints/best.ckpt, checkpoints/last.ckpt, metrics.csv, tensorboard/, results.json, and
models/<model.name>_best_weights.pth when trainer.export_weights is set. Reads no task_params.
"""
import os
import socket
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from cluster_train.shared import config as cfg
from cluster_train.shared.data import build as build_data
from cluster_train.image.lit import Classifier
from cluster_train.shared.models import MODELS
from cluster_train.image.speed import speed_facts
from cluster_train.image.tasks.common import gpu_facts, initial_validation, write_results
from cluster_train.image.trainer import build_trainer, last_checkpoint, resume_from

PARAMS = {}  # the task_params keys it reads: none


def classify(run: cfg.RunConfig) -> dict:
    out = Path(run.output_dir)
    pl.seed_everything(run.seed, workers=True)
    data = build_data(run.data)
    net = MODELS.build(run.model.name, num_classes=data.num_classes, **run.model.params)
    module = Classifier(net, run.optim)
    trainer = build_trainer(run, out)
    started = time.time()
    last = resume_from(last_checkpoint(out))  # an earlier segment's
    initial = initial_validation(trainer, module, data, last_checkpoint(out), resuming=last is not None)
    trainer.fit(module, datamodule=data, ckpt_path=last)
    final = trainer.validate(module, datamodule=data, verbose=False)[0]
    hosts = _all_hostnames(trainer)
    weights = out / "models" / f"{run.model.name}_best_weights.pth"
    best = trainer.checkpoint_callback.best_model_path
    if run.trainer.export_weights and best and trainer.is_global_zero:
        from cluster_train.image.export import export_weights

        export_weights(best, weights)
    results = {
        "model": run.model.name,
        "initial_val_loss": initial["val/loss"],
        "final_val_loss": final["val/loss"],
        "final_val_acc": final["val/acc"],
        "best_val_loss": _scalar(trainer.checkpoint_callback.best_model_score),
        "best_checkpoint": trainer.checkpoint_callback.best_model_path,
        "last_checkpoint": str(last_checkpoint(out)),
        "weights": str(weights) if run.trainer.export_weights and best else None,
        "epochs": trainer.current_epoch,
        "world_size": trainer.world_size,
        "hostnames": hosts,
        "image_sha256": os.environ.get("CT_IMAGE_SHA256"),
        "duration_s": round(time.time() - started, 1),
        "torch": torch.__version__,
        "lightning": pl.__version__,
        **gpu_facts(),
        **speed_facts(trainer, run.data.num_workers),
    }
    return write_results(out, results, write=trainer.is_global_zero)


def _all_hostnames(trainer: pl.Trainer) -> list:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        names = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(names, socket.gethostname())
        return names
    return [socket.gethostname()]


def _scalar(value):
    return None if value is None else float(value)
