"""A standalone Lightning project laid out like seed 004's SMART code base: `python train.py --config
configs/train/<shape>.yaml [--ckpt_path ...]`, a `Trainer:` and a `Dataset:` section, DDP hard-coded. It imports
nothing of cluster-train; under run-cluster it reads the variables the job documents (docs/how-to/own-code.md), and
runs the same without them:

    CT_CHECKPOINT_DIR  where checkpoints live (default ./checkpoints); last.ckpt there is resumed from
    CT_RUN_DIR         where logs and metrics go (default .)
    CT_REQUEUE_EXIT    the exit status that asks the job to requeue (after saving on SIGUSR1)
"""
import argparse
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset


class MotionClassifier(pl.LightningModule):
    """A small stand-in model: which of `classes` motion patterns a short 2-D trajectory follows."""

    def __init__(self, hidden=32, lr=0.01, classes=4, steps=8, step_sleep_s=0.0):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(steps * 2, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, classes))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        if self.hparams.step_sleep_s:
            time.sleep(self.hparams.step_sleep_s)  # stands in for a real model's step time (the requeue demo)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def trajectories(n, steps=8, classes=4, seed=0):
    """Straight, turning left, turning right or stopping: 2-D displacements with noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    turn = torch.tensor([0.0, 0.3, -0.3, 0.0])[labels]
    speed = torch.tensor([1.0, 1.0, 1.0, 0.1])[labels]
    angle = turn[:, None] * torch.arange(steps)[None, :]
    xy = torch.stack([torch.cos(angle), torch.sin(angle)], -1) * speed[:, None, None]
    return TensorDataset(xy + 0.3 * torch.randn(xy.shape, generator=g), labels)


class SaveOnSignal(pl.Callback):
    """SIGUSR1 is the job's warning before its time limit: every rank agrees at the next step, the trainer stops,
    and main() saves last.ckpt and exits with CT_REQUEUE_EXIT, so the job requeues and the next one resumes."""

    def __init__(self):
        self.signalled = False
        self.stopped = False
        signal.signal(signal.SIGUSR1, lambda *_: setattr(self, "signalled", True))  # Lightning keeps ours

    def on_train_batch_end(self, trainer, *_):
        if trainer.strategy.reduce_boolean_decision(self.signalled, all=False):
            self.stopped = trainer.should_stop = True


def say(line: str) -> None:
    """One write per line: the ranks share the job's log, and unbuffered output would interleave text and newline."""
    print(line + "\n", end="", flush=True)


def main():
    p = argparse.ArgumentParser(description="train the motion classifier")
    p.add_argument("--config", required=True)
    p.add_argument("--ckpt_path", help="resume from this checkpoint (default: CT_CHECKPOINT_DIR/last.ckpt if any)")
    args = p.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    trainer_cfg, data_cfg, model_cfg = config["Trainer"], config["Dataset"], config.get("Model", {})
    pl.seed_everything(config.get("seed", 42), workers=True)
    out = Path(os.environ.get("CT_RUN_DIR", "."))
    ckpt_dir = Path(os.environ.get("CT_CHECKPOINT_DIR", "checkpoints"))
    loader = dict(num_workers=data_cfg["num_workers"], pin_memory=data_cfg.get("pin_memory", False),
                  persistent_workers=data_cfg.get("persistent_workers", False) and data_cfg["num_workers"] > 0)
    train = DataLoader(trajectories(data_cfg.get("num_samples", 512)), batch_size=data_cfg["train_batch_size"],
                       shuffle=True, **loader)
    val = DataLoader(trajectories(256, seed=1), batch_size=data_cfg.get("val_batch_size", 64), **loader)
    on_signal = SaveOnSignal()
    trainer = pl.Trainer(
        accelerator=trainer_cfg.get("accelerator", "auto"), devices=trainer_cfg["devices"],
        num_nodes=trainer_cfg["num_nodes"], strategy=DDPStrategy(), max_epochs=trainer_cfg["max_epochs"],
        precision=trainer_cfg.get("precision", 32), accumulate_grad_batches=trainer_cfg.get("accumulate_grad_batches", 1),
        default_root_dir=str(out), logger=CSVLogger(str(out), name="", version=""), enable_progress_bar=False,
        callbacks=[ModelCheckpoint(dirpath=str(ckpt_dir), save_last=True), on_signal], deterministic=True,
        num_sanity_val_steps=0)
    say(f"rank {trainer.global_rank}/{trainer.world_size} local_rank {trainer.local_rank} node_rank "
          f"{trainer.node_rank} host {socket.gethostname()}")
    last = ckpt_dir / "last.ckpt"
    resume = args.ckpt_path or (str(last) if last.is_file() else None)
    if resume:
        say(f"rank {trainer.global_rank}: resuming from {resume}")
    trainer.fit(MotionClassifier(**model_cfg), train, val, ckpt_path=resume)
    if on_signal.stopped:
        trainer.save_checkpoint(str(last))
        say(f"rank {trainer.global_rank}: saved {last} at epoch {trainer.current_epoch}; asking for a requeue")
        raise SystemExit(int(os.environ.get("CT_REQUEUE_EXIT", "75")))
    if trainer.global_rank == 0:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        metrics.update(world_size=trainer.world_size, epochs=trainer.current_epoch, resumed_from=resume)
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


if __name__ == "__main__":
    main()
