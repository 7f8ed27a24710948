"""The DataLoader every data set uses: the settings that keep a GPU fed, from data.* of the run config."""
import torch
from torch.utils.data import DataLoader, Dataset

from train.config import DataConfig


def loader(dataset: Dataset, config: DataConfig, shuffle: bool) -> DataLoader:
    """Workers stay alive between epochs (no re-fork, no re-read of the data set's state), each keeps
    prefetch_factor batches ready, and batches land in pinned memory on GPU nodes (asynchronous copies)."""
    workers = config.num_workers
    return DataLoader(
        dataset, batch_size=config.batch_size, shuffle=shuffle, num_workers=workers,
        persistent_workers=workers > 0, prefetch_factor=config.prefetch_factor if workers > 0 else None,
        pin_memory=torch.cuda.is_available(),
    )
