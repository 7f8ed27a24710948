"""Seed 003's planner data module: reads the planner_scenes format
(cluster_train/image/data/planner_scenes_format.py)."""
import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import Dataset

from cluster_train.shared.config import DataConfig
from cluster_train.image.data import npz_shards
from cluster_train.image.data.loading import loader
from cluster_train.image.data.planner_scenes_format import FORMAT, METRICS

ARRAYS = ("scene", "ego", "imitation", *METRICS)


class PlannerScenes(Dataset):
    """Samples as dicts: scene (N, D), ego (E,), imitation (), and each metric's per-candidate target in [0, 1]."""

    def __init__(self, root, meta: dict, split: str):
        arrays = npz_shards.read_split(root, meta, split, ARRAYS)
        self.scene, self.ego = torch.from_numpy(arrays["scene"]), torch.from_numpy(arrays["ego"])
        self.imitation = torch.from_numpy(arrays["imitation"])
        scale = {"progress": 255.0}  # stored as uint8: 0/1 flags, progress times 255
        self.metrics = {m: torch.from_numpy(arrays[m].astype(np.float32) / scale.get(m, 1.0)) for m in METRICS}

    def __len__(self):
        return len(self.imitation)

    def __getitem__(self, index):
        return {"scene": self.scene[index], "ego": self.ego[index], "imitation": self.imitation[index],
                **{m: values[index] for m, values in self.metrics.items()}}


class PlannerScenesDataModule(pl.LightningDataModule):
    def __init__(self, config: DataConfig):
        super().__init__()
        self.config = config
        self.meta = npz_shards.read_meta(config.root, FORMAT)  # sizes the model is built with, before setup()
        self.vocab_size, self.scene_dim, self.ego_dim = (self.meta[k] for k in ("vocab_size", "scene_dim", "ego_dim"))

    def setup(self, stage=None):
        self.train_set = PlannerScenes(self.config.root, self.meta, "train")
        self.val_set = PlannerScenes(self.config.root, self.meta, "val")

    def train_dataloader(self):
        return loader(self.train_set, self.config, shuffle=True)

    def val_dataloader(self):
        return loader(self.val_set, self.config, shuffle=False)
