"""The DataLoader every data set uses: the settings that keep a GPU fed, from data.* of the run config, and a training
loader that resumes exactly where a stopped run stood.

Exact resume needs three things no stock DataLoader gives (torchdata's StatefulDataLoader gives the first only, and is
not in our images): an epoch's order that depends on (seed, epoch) alone, a start part-way through an epoch, and
augmentations that do not depend on how many samples a worker or the main process drew before. So the training loader
shuffles like DistributedSampler on every rank count (one included), and each sample is drawn under its own torch seed
made of (seed, epoch, index); Lightning saves the loader's `state_dict` in the checkpoint and loads it before the next
epoch's iterator (its `_Stateful` protocol).
"""
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from cluster_train.shared.config import DataConfig


def loader(dataset: Dataset, config: DataConfig, shuffle: bool) -> DataLoader:
    """Workers stay alive between epochs (no re-fork, no re-read of the data set's state), each keeps
    prefetch_factor batches ready, and batches land in pinned memory on GPU nodes (asynchronous copies).
    A shuffled (training) loader resumes mid-epoch; an evaluation loader is a plain one."""
    workers = config.num_workers
    options = dict(batch_size=config.batch_size, num_workers=workers, persistent_workers=workers > 0,
                   prefetch_factor=config.prefetch_factor if workers > 0 else None,
                   pin_memory=torch.cuda.is_available())
    if not shuffle:
        return DataLoader(dataset, shuffle=False, **options)
    seed = int(os.environ.get("PL_GLOBAL_SEED", 0))  # pl.seed_everything's, as Lightning's own DistributedSampler
    return ResumableLoader(SeededSamples(dataset, seed), sampler=ResumableSampler(dataset, seed), **options,
                           generator=torch.Generator().manual_seed(seed))  # worker seeds: not the global stream


def sample_seed(seed: int, epoch: int, index: int) -> int:
    return ((seed * 1_000_003 + epoch) * 1_000_000_007 + index) & 0x7FFF_FFFF_FFFF_FFFF  # manual_seed takes int64


class SeededSamples(Dataset):
    """Sample `index` of epoch `epoch` is read under torch seed (seed, epoch, index), the caller's torch RNG left as it
    was: a random crop is the same whichever process reads it, after whatever went before (a resume included)."""

    def __init__(self, dataset: Dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, key):
        epoch, index = key
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(sample_seed(self.seed, epoch, index))
            return self.dataset[index]


class ResumableSampler(DistributedSampler):
    """DistributedSampler's order (a permutation seeded by seed + epoch, this rank's share of it) on one rank too, as
    (epoch, index) pairs for SeededSamples, starting `start` samples into the epoch after a resume. Being a
    DistributedSampler, Lightning keeps it instead of putting its own in under DDP."""

    def __init__(self, dataset: Dataset, seed: int):
        distributed = dist.is_available() and dist.is_initialized()
        super().__init__(dataset, num_replicas=dist.get_world_size() if distributed else 1,
                         rank=dist.get_rank() if distributed else 0, shuffle=True, seed=seed)
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.start = 0  # a resume's start holds for the epoch it stopped in only
        super().set_epoch(epoch)

    def resume(self, epoch: int, start: int) -> None:
        super().set_epoch(epoch)
        self.start = start

    def __iter__(self):
        start, self.start = self.start, 0
        epoch = self.epoch
        for position, index in enumerate(super().__iter__()):
            if position >= start:
                yield epoch, index


class ResumableLoader(DataLoader):
    """Knows which batch of which epoch it stands at (batches yielded: Lightning fetches a sized loader's batches one
    at a time, no prefetch) and starts there again when a checkpoint's state is loaded. `epoch_length` is the batches
    the Trainer takes per epoch (limit_train_batches), set by cluster_train/image/guard.py; else the whole loader."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.yielded, self.epoch_length = 0, None

    def __iter__(self):
        self.yielded = self.sampler.start // self.batch_size
        for batch in super().__iter__():
            self.yielded += 1
            yield batch

    def state_dict(self) -> dict:
        finished = self.yielded >= (self.epoch_length or len(self))
        return {"epoch": self.sampler.epoch + finished, "batch": 0 if finished else self.yielded}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.resume(int(state["epoch"]), int(state["batch"]) * self.batch_size)
