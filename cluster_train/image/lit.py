"""The LightningModule that trains any registered classifier."""
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from cluster_train.shared.config import OptimConfig
from cluster_train.shared.optimizers import build_optimizer, build_scheduler


class Classifier(pl.LightningModule):
    def __init__(self, model: torch.nn.Module, optim: OptimConfig):
        super().__init__()
        self.model = model
        self.optim = optim

    def __setattr__(self, name, value):
        if name == "_current_fx_name":  # Lightning names the running hook around each hook call, ~44 times a step:
            object.__setattr__(self, name, value)  # a plain string, set without nn.Module's parameter/module checks
        else:
            super().__setattr__(name, value)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)  # not self(x): DeepSpeed hooks the LightningModule, re-entry breaks its timers
        loss = F.cross_entropy(logits, y)
        # this rank's values at each logging step: sync_dist here would add two all-reduces to every training step
        # (Lightning reduces on_step values at every call); validation, logged per epoch, is reduced over all ranks
        if logging_step(self.trainer):
            self.log("train/loss", loss, prog_bar=progress_bar(self.trainer))
            self.log("train/acc", (logits.argmax(1) == y).float().mean())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)  # not self(x): DeepSpeed hooks the LightningModule, re-entry breaks its timers
        bar = progress_bar(self.trainer)
        self.log("val/loss", F.cross_entropy(logits, y), prog_bar=bar, sync_dist=True)
        self.log("val/acc", (logits.argmax(1) == y).float().mean(), prog_bar=bar, sync_dist=True)

    def configure_optimizers(self):
        opt = build_optimizer(self.parameters(), self.optim)
        sched = build_scheduler(opt, self.optim, self.trainer.max_epochs)
        if sched is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": sched}


def logging_step(trainer) -> bool:
    """Whether the loggers write this training step's metrics: every `trainer.log_every_n_steps` steps (and on the
    step training stops), the only steps whose on_step values reach metrics.csv or TensorBoard. Logging (and the
    accuracy) on those steps alone leaves the logged rows as they were and spares every other step Lightning's
    per-call bookkeeping, ~0.3 ms a call on a 2-core VM (benchmarks/README.md); trainer.callback_metrics then hold the
    last logged step's train/* values, not the last step's."""
    connector = getattr(trainer, "_logger_connector", None)
    return connector is None or connector.should_update_logs


def progress_bar(trainer) -> bool:
    """prog_bar=True only where a progress bar shows it: Lightning turns each prog_bar value into a Python number
    after every batch (`.item()`: on a GPU the host waits there for the step's kernels) whether or not a bar is drawn,
    and `fit` runs without one (cluster_train/image/trainer.py: batch-job logs are files)."""
    return trainer.progress_bar_callback is not None
