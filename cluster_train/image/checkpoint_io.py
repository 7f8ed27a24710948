"""Checkpoints written atomically: a kill -9 or a full disk during a save leaves the previous file intact.

A file checkpoint (single, ddp, fsdp with full state dicts) is serialised in memory, written to a temporary file in
the same directory, fsynced and renamed over the old one (`os.replace` is atomic on one filesystem), then the
directory is fsynced so the rename survives a node crash. A full disk (ENOSPC, EDQUOT) prints one line and exits
with cluster_train.shared.exit_codes.DISK_FULL.

DeepSpeed saves a directory written by every rank; `atomic_directory_saves` makes it write into a temporary
directory, then rank 0 moves the old directory aside, renames the new one into place and removes the old one. Two
renames are not one atomic step: a kill exactly between them leaves `<name>.old` (the previous checkpoint, complete)
and no `<name>`; `restore_aside` puts it back when the run starts again.
"""
import io
import itertools
import os
import shutil
from pathlib import Path

import torch
from lightning_fabric.utilities.types import _PATH
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning.plugins.io import AsyncCheckpointIO, TorchCheckpointIO

from cluster_train.image import heartbeat
from cluster_train.shared.durable import atomic_write_bytes, disk_full, fsync_dir


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict, path: _PATH, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getbuffer())
        heartbeat.note_progress()  # a long save is progress, not a hang (the watchdog reads the time)


class StagedAsyncCheckpointIO(AsyncCheckpointIO):
    """Lightning's AsyncCheckpointIO (a thread writes the checkpoint while training goes on), its snapshot copied into
    buffers kept from the previous save instead of fresh clones: a fresh clone of a large tensor is new memory that
    page-faults in at every save (~95 ms of a 90 MB snapshot on a 2-core VM, the step that saves stalls that long;
    benchmarks/README.md). The next save waits for the previous write, whose buffers it reuses."""

    def __init__(self, checkpoint_io=None):
        super().__init__(checkpoint_io)
        self._staged = {}  # the n-th tensor of the checkpoint -> its buffer
        self._writing = None

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        self._ensure_setup()
        if self._writing is not None:
            self._writing.result()
        if self._error:
            raise self._error
        self._writing = self._executor.submit(self._write, self._stage(checkpoint), path, storage_options)

    def _write(self, checkpoint, path, storage_options) -> None:
        try:
            self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options)
        except BaseException as err:  # raised on the training thread at the next save or at teardown
            self._error = err

    def _stage(self, checkpoint):
        """The checkpoint with each tensor copied into its buffer: the n-th tensor met (Lightning's traversal, the same
        order at every save) into buffer n, made anew where its shape, dtype, device or layout changed."""
        places = itertools.count()
        return apply_to_collection(checkpoint, torch.Tensor, lambda tensor: self._copy(next(places), tensor))

    def _copy(self, place: int, tensor: torch.Tensor) -> torch.Tensor:
        buffer = self._staged.get(place)
        if buffer is None or (buffer.shape, buffer.dtype, buffer.device, buffer.stride()) != (
                tensor.shape, tensor.dtype, tensor.device, tensor.stride()):
            buffer = self._staged[place] = torch.empty_like(tensor, memory_format=torch.preserve_format)
        return buffer.copy_(tensor.detach())


def restore_aside(path) -> None:
    """A directory checkpoint left as `<path>.old` by a kill between the two renames: put it back."""
    path = Path(path)
    aside = path.with_name(path.name + ".old")
    if aside.is_dir() and not path.exists():
        os.replace(aside, path)


def atomic_directory_saves(strategy) -> None:
    """Make a strategy that saves a checkpoint directory (DeepSpeed) write a temporary one and swap it in."""
    save = strategy.save_checkpoint

    def save_then_swap(checkpoint, filepath, storage_options=None):
        final = Path(filepath)
        tmp = final.with_name(f".{final.name}.tmp")
        if strategy.is_global_zero and tmp.exists():
            shutil.rmtree(tmp)
        strategy.barrier("atomic_directory_saves.clean")
        try:
            save(checkpoint, str(tmp), storage_options=storage_options)
        except OSError as err:
            disk_full(final, err)
            raise
        strategy.barrier("atomic_directory_saves.written")
        if strategy.is_global_zero:
            aside = final.with_name(final.name + ".old")
            if final.exists():
                os.replace(final, aside)
            os.replace(tmp, final)
            fsync_dir(final.parent)
            shutil.rmtree(aside, ignore_errors=True)
        strategy.barrier("atomic_directory_saves.swapped")
        heartbeat.note_progress()

    strategy.save_checkpoint = save_then_swap
