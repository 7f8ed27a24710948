"""cluster_train/image/lit.py's Classifier: what its training steps log, and on which steps (per-step cost:
benchmarks/README.md)."""
import csv

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from cluster_train.shared import config as cfg
from cluster_train.image.lit import Classifier
from cluster_train.image.trainer import build_trainer


class Recording(Classifier):
    """Each step's own loss and accuracy (a Linear model: recomputing them before the optimizer step gives the same)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.seen, self.logs = {}, 0

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        with torch.no_grad():
            x, y = batch
            self.seen[self.global_step] = (float(loss), float((self.model(x).argmax(1) == y).float().mean()))
        return loss

    def log(self, *args, **kwargs):
        self.logs += 1
        super().log(*args, **kwargs)


def data(n=40):
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4), torch.randint(0, 3, (n,))), batch_size=8)


def test_train_metrics_reach_the_loggers_on_their_steps_with_that_steps_values_and_are_logged_then_only(tmp_path):
    run = cfg.resolve({"output_dir": str(tmp_path), "optim": {"name": "sgd", "lr": 0.1, "scheduler": "none"},
                       "trainer": {"accelerator": "cpu", "strategy": "single", "max_epochs": 2,
                                   "log_every_n_steps": 3}})
    module = Recording(torch.nn.Linear(4, 3), run.optim)
    trainer = build_trainer(run, tmp_path)
    trainer.fit(module, data())  # 5 steps an epoch, 10 in all
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    assert [int(r["step"]) for r in rows] == [2, 5, 8]  # every 3rd step, across the epoch boundary
    for row in rows:
        loss, acc = module.seen[int(row["step"])]
        assert abs(float(row["train/loss"]) - loss) < 1e-6 and abs(float(row["train/acc"]) - acc) < 1e-6
    assert module.logs == 2 * 3  # train/loss and train/acc on those 3 steps, not on all 10
    assert trainer.progress_bar_metrics == {}  # fit draws no bar: no value is made a Python number after each step


def test_a_trainer_with_a_progress_bar_still_shows_the_training_loss():
    module = Classifier(torch.nn.Linear(4, 3), cfg.OptimConfig(name="sgd", lr=0.1, scheduler="none"))
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(module, data(16))
    assert set(trainer.progress_bar_metrics) == {"train/loss"}
