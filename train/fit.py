"""`python -m train fit`: build model, data and Trainer from a resolved RunConfig, train, write results."""
import json
import os
import socket
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

from train import config as cfg
from train.data import DATASETS
from train.lit import Classifier
from train.lsf_environment import LSFHostfileEnvironment
from train.models import MODELS
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


def fit(run: cfg.RunConfig) -> dict:
    """Run the config's task (train/tasks): `classify` below by default, or video_suite, cifar_experts, ..."""
    from train.tasks import TASKS

    return TASKS.get(run.task)(run)


def classify(run: cfg.RunConfig) -> dict:
    """One registered model on one data set: checkpoints/best.ckpt, last.ckpt, metrics.csv, results.json."""
    out = Path(run.output_dir)
    pl.seed_everything(run.seed, workers=True)
    data = DATASETS.build(run.data.name, config=run.data)
    net = MODELS.build(run.model.name, num_classes=data.num_classes, **run.model.params)
    module = Classifier(net, run.optim)
    trainer = build_trainer(run, out)
    started = time.time()
    initial = trainer.validate(module, datamodule=data, verbose=False)[0]
    trainer.fit(module, datamodule=data)
    final = trainer.validate(module, datamodule=data, verbose=False)[0]
    hosts = _all_hostnames(trainer)
    weights = out / "models" / f"{run.model.name}_best_weights.pth"
    best = trainer.checkpoint_callback.best_model_path
    if run.trainer.export_weights and best and trainer.is_global_zero:
        from train.export import export_weights

        export_weights(best, weights)
    results = {
        "model": run.model.name,
        "initial_val_loss": initial["val/loss"],
        "final_val_loss": final["val/loss"],
        "final_val_acc": final["val/acc"],
        "best_val_loss": _scalar(trainer.checkpoint_callback.best_model_score),
        "best_checkpoint": trainer.checkpoint_callback.best_model_path,
        "last_checkpoint": str(out / "checkpoints" / "last.ckpt"),
        "weights": str(weights) if run.trainer.export_weights and best else None,
        "epochs": trainer.current_epoch,
        "world_size": trainer.world_size,
        "hostnames": hosts,
        "image_sha256": os.environ.get("CT_IMAGE_SHA256"),
        "duration_s": round(time.time() - started, 1),
        "torch": torch.__version__,
        "lightning": pl.__version__,
    }
    if trainer.is_global_zero:
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(f"[cluster-train] results: {json.dumps(results)}", flush=True)
    return results


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


def _all_hostnames(trainer: pl.Trainer) -> list:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        names = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(names, socket.gethostname())
        return names
    return [socket.gethostname()]


def _scalar(value):
    return None if value is None else float(value)
