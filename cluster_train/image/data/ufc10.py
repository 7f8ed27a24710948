"""UFC-10 video data module (seed 000's layout, see ufc10_format) and a generator of a small learnable set.

Batches are clips shaped (B, T, C, H, W), normalised per channel to roughly zero mean and unit spread.
"""
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import Dataset

from cluster_train.shared.config import DataConfig
from cluster_train.image.data.loading import loader
from cluster_train.image.data import ufc10_format as fmt

NUM_CLASSES = 10
# What each generated class does; the class is in the motion only, so a single frame cannot tell them apart.
ACTIONS = (
    "right_slow", "right_fast", "left_slow", "left_fast", "up_slow", "up_fast", "down_slow", "down_fast",
    "right_then_left", "left_then_right",
)


class VideoClips(Dataset):
    def __init__(self, root, split: str, num_frames: int, augment: bool):
        self.videos = fmt.read_split(root, split)
        self.num_frames = num_frames
        self.augment = augment
        self._cache = {}  # decoded clips: the data sets this module trains on in CI are small

    def __len__(self):
        return len(self.videos)

    def __getitem__(self, index):
        if index not in self._cache:
            self._cache[index] = torch.from_numpy(fmt.read_frames(self.videos[index], self.num_frames))
        clip = self._cache[index].permute(0, 3, 1, 2).float().div(255)  # (T, C, H, W)
        if self.augment and torch.rand(()) < 0.5:
            clip = clip + 0.05 * torch.randn(())  # brightness jitter; flips would swap the left/right classes
        return (clip - 0.5) / 0.25, self.videos[index].label


class VideoDataModule(pl.LightningDataModule):
    num_classes = NUM_CLASSES

    def __init__(self, config: DataConfig, num_frames: int = 8):
        super().__init__()
        self.config = config
        self.num_frames = num_frames

    def setup(self, stage=None):
        root, t = self.config.root, self.num_frames
        self.train_set = VideoClips(root, "train", t, augment=self.config.augment)
        self.val_set = VideoClips(root, "val", t, augment=False)
        self.test_set = VideoClips(root, "test", t, augment=False)

    def train_dataloader(self):
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self):
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self):
        return self._loader(self.test_set, shuffle=False)

    def _loader(self, dataset, shuffle: bool):
        return loader(dataset, self.config, shuffle)


def generate_ufc10(root, train_per_class: int = 12, val_per_class: int = 4, test_per_class: int = 4,
                   frames: int = 8, size: int = 32, seed: int = 0) -> Path:
    """Write a small UFC-10-layout set: a bright square moves over a noisy background; the class is its
    direction, speed, or the order of two movements, and its start point is random, so every class shows
    the same per-frame picture and only a model that compares frames can tell them apart."""
    rng = np.random.default_rng(seed)
    for split, per_class in (("train", train_per_class), ("val", val_per_class), ("test", test_per_class)):
        rows = []
        for label, action in enumerate(ACTIONS):
            for i in range(per_class):
                name = f"v_{action}_{split}_{i:03d}"
                fmt.write_video(root, split, action, name, _render(rng, action, frames, size))
                rows.append((name, action, label))
        fmt.write_metadata(root, split, rows)
    return Path(root)


def _render(rng, action: str, frames: int, size: int) -> np.ndarray:
    box = max(3, size // 6)
    travel = size - box
    if action.endswith("_then_left") or action.endswith("_then_right"):
        sign = 1 if action.startswith("right") else -1
        half = frames // 2
        step = travel / max(1, half)
        start = 0 if sign > 0 else travel
        along = [start + sign * step * min(k, half) - sign * step * max(0, k - half) for k in range(frames)]
        axis = 1
    else:
        direction, speed = action.split("_")
        step = (travel / (frames - 1)) * (1.0 if speed == "fast" else 0.35)
        span = step * (frames - 1)
        sign = 1 if direction in ("right", "down") else -1
        start = rng.uniform(0, travel - span) + (0 if sign > 0 else span)
        along = [start + sign * step * k for k in range(frames)]
        axis = 1 if direction in ("right", "left") else 0
    across = rng.uniform(0, travel)
    colour = rng.uniform(180, 255, size=3)
    video = rng.normal(60, 20, size=(frames, size, size, 3))
    for k, pos in enumerate(along):
        a, b = int(round(pos)), int(round(across))
        y, x = (b, a) if axis == 1 else (a, b)
        video[k, y : y + box, x : x + box] = colour
    return np.clip(video, 0, 255).astype(np.uint8)
