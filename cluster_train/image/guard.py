"""RunGuard: the callback every Trainer carries so a run survives its allocation and says how it ended.

- stop on request: SIGUSR1/SIGTERM or the job's stop file (cluster_train/image/stop.py) set a flag; at every batch end
  the ranks agree on it (one small all-reduce when world size > 1), save `last_path` at that same step, and exit
  cluster_train.shared.exit_codes.REQUEUE (75). When the request lands on an epoch's last batch the save waits for the
  epoch end (after validation); on a step whose metrics row Lightning writes after this hook, it waits one step: the
  resumed run's metrics.csv has every row.
- NaN/inf loss: the same all-reduce carries the loss; a non-finite one prints one line and exits NAN_LOSS without
  saving, so the last good checkpoint stays.
- progress: rank 0 prints one line per epoch.
- RNG state (torch, numpy, python, CUDA) travels in the checkpoint, and the training loader's position with it
  (cluster_train/image/data/loading.py), so a run resumed mid-epoch
  draws the same batches and ends as if it had not stopped.
- `$CT_RUN_DIR/logs/segments.jsonl`: rank 0 appends a `train_start` line when a process first starts training, with
  the steps the previous segment lost (made after the checkpoint this one resumes from).
"""
import json
import math
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from lightning_fabric.utilities.seed import _collect_rng_states, _set_rng_states
from pytorch_lightning.callbacks import Callback

from cluster_train.shared import exit_codes
from cluster_train.image import csv_append, heartbeat, stop
from cluster_train.image.data.loading import ResumableLoader

_segment_recorded = []  # one train_start line per process, however many models it trains


def tell(message: str, error: bool = False) -> None:
    print(f"[cluster-train] {'error: ' if error else ''}{message}", file=sys.stderr if error else sys.stdout,
          flush=True)


def record_train_start(trainer) -> None:
    run_dir = os.environ.get("CT_RUN_DIR")
    if not run_dir or _segment_recorded or not trainer.is_global_zero:
        return
    _segment_recorded.append(True)
    segment = os.environ.get("CT_SEGMENT", "")
    resumed = trainer.ckpt_path is not None
    line = {"event": "train_start", "segment": int(segment) if segment.isdigit() else None,
            "output_dir": str(trainer.default_root_dir),
            "resumed_epoch": trainer.current_epoch if resumed else None,
            "resumed_step": trainer.global_step if resumed else None,
            "lost_steps": lost_steps(Path(run_dir), trainer.global_step) if resumed else None,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    logs = Path(run_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "segments.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def lost_steps(run_dir: Path, resumed_step: int):
    """The steps the previous segment made beyond `resumed_step`: its rank 0 progress file's first field
    (GLOBAL_STEP, cluster_train/image/heartbeat.py), read before this segment's first write; None where it left none."""
    try:
        last_step = int((run_dir / "logs" / "progress" / "rank-0").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0, last_step - resumed_step)


class RunGuard(Callback):
    def __init__(self, last_path):
        self.last_path = Path(last_path)
        self._save_at_epoch_end = self._deferred = False
        self._losses, self._started = [], time.time()

    def setup(self, trainer, pl_module, stage):
        stop.install()  # also done by `python -m train fit` first thing; here for Trainers built elsewhere

    def on_train_start(self, trainer, pl_module):
        stop.install()
        record_train_start(trainer)
        csv_append.resumed_at(trainer)
        heartbeat.start(trainer)  # every rank's progress, for the batch shell's watchdog

    def on_train_epoch_start(self, trainer, pl_module):
        self._losses, self._started = [], time.time()
        for loader in _loaders(trainer.train_dataloader):  # where its epoch ends, for its saved position
            if isinstance(loader, ResumableLoader):
                loader.epoch_length = trainer.num_training_batches

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        value = float(loss.detach()) if torch.is_tensor(loss) else 0.0
        stopping = 1.0 if stop.poll() else 0.0
        if trainer.world_size > 1:  # every rank must take the same decision at the same step
            agreed = trainer.strategy.reduce(torch.tensor([stopping, value], device=trainer.strategy.root_device),
                                             reduce_op="sum")
            stopping, value = float(agreed[0]), float(agreed[1]) / trainer.world_size
        if not math.isfinite(value):
            self._fail_on_loss(trainer, value)
        self._losses.append(value)
        if stopping and not self._save_at_epoch_end:
            if batch_idx + 1 >= trainer.num_training_batches:
                self._save_at_epoch_end = True  # the epoch's validation first: resume at a clean boundary
            elif self._deferred or not trainer._logger_connector.should_update_logs:
                self._save_and_exit(trainer)
            else:  # this step's metrics row is written after this hook: stop one step later, so no row is lost
                self._deferred = True

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.is_global_zero and self._losses:
            val = trainer.callback_metrics.get("val/loss")
            val = f"{float(val):.4f}" if val is not None else "-"
            tell(f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs} step {trainer.global_step} "
                 f"train/loss {sum(self._losses) / len(self._losses):.4f} val/loss {val} "
                 f"({time.time() - self._started:.1f} s)")
        if self._save_at_epoch_end and trainer.current_epoch + 1 < trainer.max_epochs:
            self._save_and_exit(trainer)  # after the last epoch there is nothing to requeue: the run completes

    def _save_and_exit(self, trainer):
        started = time.time()
        for logger in trainer.loggers:  # rows the CSV logger still buffers would die with the process
            logger.save()
        trainer.save_checkpoint(self.last_path)
        if trainer.is_global_zero:
            tell(f"stop requested ({stop.requested() or 'another rank'}): saved {self.last_path} at step "
                 f"{trainer.global_step} (epoch {trainer.current_epoch + 1}) in {time.time() - started:.1f} s; "
                 f"exiting {exit_codes.REQUEUE} to be requeued")
        raise SystemExit(exit_codes.REQUEUE)

    def _fail_on_loss(self, trainer, value):
        if trainer.is_global_zero:
            last = self.last_path if self.last_path.exists() else "none yet"
            tell(f"loss became {value} at step {trainer.global_step} (epoch {trainer.current_epoch + 1}); "
                 f"last good checkpoint: {last}", error=True)
        raise SystemExit(exit_codes.NAN_LOSS)

    def state_dict(self):
        rng = _collect_rng_states(include_cuda=torch.cuda.is_available())
        name, keys, *rest = rng["numpy"]
        rng["numpy"] = (name, keys.tolist(), *rest)  # plain types: the checkpoint still loads with weights_only=True
        return {"rng": rng}

    def load_state_dict(self, state_dict):
        if "rng" in state_dict:
            rng = dict(state_dict["rng"])
            name, keys, *rest = rng["numpy"]
            rng["numpy"] = (name, np.asarray(keys, dtype=np.uint32), *rest)
            _set_rng_states(rng)


def _loaders(loaders):
    """The DataLoaders in what a data module's train_dataloader returned (one, or a list or dict of them)."""
    if isinstance(loaders, dict):
        return list(loaders.values())
    return list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]


def keep_our_signal_handlers(trainer) -> None:
    """Lightning's signal connector would put its own SIGTERM handler (and, for Slurm auto-requeue, a SIGUSR1 one
    calling `scontrol`) over ours for the length of fit; the batch shell owns requeue, so it installs nothing."""
    trainer._signal_connector.register_signal_handlers = stop.install
