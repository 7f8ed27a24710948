"""A data module that trains on chosen indices of another data module's training set (experts vs fusion split)."""
import numpy as np
import pytorch_lightning as pl
from torch.utils.data import Subset


class TrainSubset(pl.LightningDataModule):
    def __init__(self, base: pl.LightningDataModule, indices: np.ndarray):
        super().__init__()
        self.base, self.indices = base, indices
        self.num_classes = base.num_classes

    def setup(self, stage=None):
        self.base.setup(stage)
        self.base.train_set = Subset(self.base.train_set, [int(i) for i in self.indices])

    def train_dataloader(self):
        return self.base.train_dataloader()

    def val_dataloader(self):
        return self.base.val_dataloader()


def train_size(base: pl.LightningDataModule) -> int:
    base.setup("fit")
    return len(base.train_set)
