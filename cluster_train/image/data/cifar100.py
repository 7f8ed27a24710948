"""CIFAR-100 data module (reads the real python-format files) and a generator of a small learnable set."""
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import Dataset

from cluster_train.shared.config import DataConfig
from cluster_train.image.data.loading import loader
from cluster_train.image.data import cifar100_format as fmt

NUM_CLASSES = 100
# The published CIFAR-100 training-set channel statistics.
MEAN = torch.tensor([0.5071, 0.4865, 0.4409]).view(3, 1, 1)
STD = torch.tensor([0.2673, 0.2564, 0.2762]).view(3, 1, 1)


class Cifar100Split(Dataset):
    def __init__(self, root, split: str, augment: bool):
        self.images, self.labels = fmt.read_split(root, split)
        self.augment = augment

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        image = torch.from_numpy(self.images[index]).permute(2, 0, 1).float().div_(255)
        if self.augment:
            image = _random_crop_flip(image)
        return (image - MEAN) / STD, int(self.labels[index])


def _random_crop_flip(image: torch.Tensor, pad: int = 4) -> torch.Tensor:
    # Written out rather than taken from torchvision: PyPI has no CPU torchvision for the host test venv.
    padded = torch.nn.functional.pad(image, (pad, pad, pad, pad), mode="reflect")
    top, left = torch.randint(0, 2 * pad + 1, (2,)).tolist()
    image = padded[:, top : top + 32, left : left + 32]
    return image.flip(-1) if torch.rand(()) < 0.5 else image


class Cifar100DataModule(pl.LightningDataModule):
    num_classes = NUM_CLASSES

    def __init__(self, config: DataConfig):
        super().__init__()
        self.config = config

    def setup(self, stage=None):
        self.train_set = Cifar100Split(self.config.root, "train", augment=self.config.augment)
        self.val_set = Cifar100Split(self.config.root, "test", augment=False)

    def train_dataloader(self):
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self):
        return self._loader(self.val_set, shuffle=False)

    def _loader(self, dataset, shuffle: bool):
        return loader(dataset, self.config, shuffle)


def generate_cifar100(root, train_per_class: int = 20, test_per_class: int = 5, seed: int = 0) -> Path:
    """Write a small CIFAR-100-format set whose classes are learnable: each class is a colour layout
    (a random 4x4 pattern upsampled to 32x32); samples add noise and a small shift."""
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(30, 225, size=(NUM_CLASSES, 4, 4, 3)).repeat(8, axis=1).repeat(8, axis=2)
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        fine = np.repeat(np.arange(NUM_CLASSES), per_class)
        rng.shuffle(fine)
        shifts = rng.integers(-2, 3, size=(len(fine), 2))
        images = np.stack([np.roll(prototypes[c], tuple(s), axis=(0, 1)) for c, s in zip(fine, shifts)])
        images = np.clip(images + rng.normal(0, 35, images.shape), 0, 255).astype(np.uint8)
        fmt.write_split(root, split, images, fine, fine // 5)
    fmt.write_meta(root, [f"class_{i:02d}" for i in range(NUM_CLASSES)], [f"superclass_{i:02d}" for i in range(20)])
    return Path(root)
