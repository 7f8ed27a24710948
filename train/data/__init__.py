"""Data set registry: `DATASETS.build(name, config=DataConfig)` returns a LightningDataModule."""
from train.registry import Registry

DATASETS = Registry("data set")

# Generators write small learnable data sets in each loader's real on-disk format (numpy only, no torch).
GENERATORS = Registry("data generator")

from train.data import cifar100, ufc10  # noqa: E402,F401  (register their data modules and generators)
