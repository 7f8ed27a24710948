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
import os
import shutil
from pathlib import Path

import torch
from lightning_fabric.utilities.types import _PATH
from pytorch_lightning.plugins.io import TorchCheckpointIO

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
