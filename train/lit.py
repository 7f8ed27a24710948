"""The LightningModule that trains any registered classifier."""
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from train.config import OptimConfig


class Classifier(pl.LightningModule):
    def __init__(self, model: torch.nn.Module, optim: OptimConfig):
        super().__init__()
        self.model = model
        self.optim = optim

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)  # not self(x): DeepSpeed hooks the LightningModule, re-entry breaks its timers
        loss = F.cross_entropy(logits, y)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        self.log("train/acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)  # not self(x): DeepSpeed hooks the LightningModule, re-entry breaks its timers
        self.log("val/loss", F.cross_entropy(logits, y), prog_bar=True, sync_dist=True)
        self.log("val/acc", (logits.argmax(1) == y).float().mean(), prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        cfg = self.optim
        if cfg.name == "sgd":
            opt = torch.optim.SGD(self.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        elif cfg.name == "adamw":
            opt = torch.optim.AdamW(self.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        else:
            raise ValueError(f"unknown optimizer {cfg.name!r}; choose sgd or adamw")
        if cfg.scheduler == "none":
            return opt
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.trainer.max_epochs))
        return {"optimizer": opt, "lr_scheduler": sched}
