"""Seed 004's motion-token data module: reads the motion_tokens format
(cluster_train/image/data/motion_tokens_format.py)."""
import pytorch_lightning as pl
import torch
from torch.utils.data import Dataset

from cluster_train.shared.config import DataConfig
from cluster_train.image.data import npz_shards
from cluster_train.image.data.loading import loader
from cluster_train.image.data.motion_tokens_format import FORMAT


class MotionTokenScenes(Dataset):
    """One scene per sample: its tokens (agents, steps) as int64, the model's input and its own shifted target."""

    def __init__(self, root, meta: dict, split: str):
        self.tokens = torch.from_numpy(npz_shards.read_split(root, meta, split, ["tokens"])["tokens"].astype("int64"))

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        return self.tokens[index]


class MotionTokensDataModule(pl.LightningDataModule):
    def __init__(self, config: DataConfig):
        super().__init__()
        self.config = config
        self.meta = npz_shards.read_meta(config.root, FORMAT)  # the vocabulary the model is built with
        self.vocab_size, self.agents, self.steps = (self.meta[k] for k in ("vocab_size", "agents", "steps"))

    def setup(self, stage=None):
        self.train_set = MotionTokenScenes(self.config.root, self.meta, "train")
        self.val_set = MotionTokenScenes(self.config.root, self.meta, "val")

    def train_dataloader(self):
        return loader(self.train_set, self.config, shuffle=True)

    def val_dataloader(self):
        return loader(self.val_set, self.config, shuffle=False)
