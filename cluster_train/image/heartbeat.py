"""Each rank's progress, written where the batch shell's watchdog reads it (cluster_train/host/schedulers/templates/
_watchdog.sh.j2): one daemon thread per rank rewrites `$CT_RUN_DIR/logs/progress/rank-<R>` every CT_HEARTBEAT_S
seconds (default 5) as one line `GLOBAL_STEP PROGRESS_TIME ALIVE_TIME STEP_S HOST PID`, and `rank-<R>.stack` beside
it: the main thread's Python stack, so a rank that froze has left its last one.

Why a thread: a rank blocked in a collective or in I/O releases the GIL, so its thread goes on writing ALIVE_TIME
while PROGRESS_TIME stands still; a stopped or frozen process stops both, which is how the watchdog tells the stuck
rank from the ones waiting for it. The training loop does no I/O for this: its hooks only update a few numbers.

Dump request: when `logs/progress/dump` is newer than this thread's last dump, it writes every thread's stack
(faulthandler) and, with NCCL, the collective flight recorder into the directory that file names.
"""
import faulthandler
import os
import socket
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Optional

from pytorch_lightning.callbacks import Callback

from cluster_train.image import gpu_power

TIMED_STEPS = 50  # STEP_S is the median over this many recent steps
MIN_TIMED = 5  # ... once this many were timed (0.000 before)
_beat: list = []  # this process's one Heartbeat, however many Trainers it runs


class Heartbeat(Callback):
    """The numbers the hooks update and the thread writes; appended to the Trainer's callbacks at train start."""

    def __init__(self, directory: Path, rank: int, interval_s: float, step: int):
        self.directory, self.rank, self.interval_s = directory, rank, interval_s
        self.step, self.progress_time, self.training = step, time.time(), True
        self._last_end: Optional[float] = None
        self._step_times: deque = deque(maxlen=TIMED_STEPS)
        self._stopped = threading.Event()
        self._last_dump = 0.0
        self._main = threading.main_thread().ident
        self._thread: Optional[threading.Thread] = None
        self.power: Optional[gpu_power.PowerMeter] = None  # this rank's GPU's energy, sampled each beat

    # the training loop's side: numbers only
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.time()
        if self._last_end is not None:
            self._step_times.append(now - self._last_end)
        self._last_end, self.step, self.progress_time = now, trainer.global_step, now

    def on_validation_batch_end(self, *args, **kwargs):
        self.progress_time = time.time()
        self._last_end = None  # a step that spans validation is not a step time

    def on_train_end(self, trainer, pl_module):
        # what follows training (a last validation, the results, an export) is watched for a frozen process only:
        # every beat is progress until the process ends or trains again
        self.training = False

    def note_progress(self) -> None:
        """Progress outside a batch (a checkpoint save's end)."""
        self.progress_time = time.time()
        self._last_end = None

    def step_s(self) -> float:
        times = list(self._step_times)
        return statistics.median(times) if len(times) >= MIN_TIMED else 0.0

    # the thread's side
    def start(self) -> None:
        """Start the thread, or a new one after an earlier training's end stopped it."""
        if self._thread is not None and self._thread.is_alive() and not self._stopped.is_set():
            return
        if self._thread is not None:
            self._thread.join()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._stopped.clear()
        self._thread = threading.Thread(target=self._run, name="cluster-train-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while True:
            try:
                self.write()
                self._dump_if_asked()
                if self.power is not None:
                    self.sample_power()
            except OSError:
                pass  # a full or vanished file system: the watchdog sees this rank go silent, which is the truth
            if self._stopped.wait(self.interval_s):
                return

    def sample_power(self) -> None:
        line = self.power.sample()
        if line is None:
            self.power = None
            return
        self.power.path.parent.mkdir(exist_ok=True)
        _replace(self.power.path, line)

    def line(self) -> str:
        return (f"{self.step} {int(self.progress_time)} {int(time.time())} {self.step_s():.3f} "
                f"{socket.gethostname()} {os.getpid()}\n")

    def write(self) -> None:
        if not self.training:
            self.progress_time = time.time()
        frame = sys._current_frames().get(self._main)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(main thread gone)\n"
        _replace(self.directory / f"rank-{self.rank}.stack", stack)
        _replace(self.directory / f"rank-{self.rank}", self.line())

    def _dump_if_asked(self) -> None:
        request = self.directory / "dump"
        try:
            asked = request.stat().st_mtime
        except FileNotFoundError:
            return
        if asked <= self._last_dump:
            return
        self._last_dump = asked
        named = request.read_text().strip()
        target = Path(named) if os.path.isabs(named) else self.directory.parent.parent / named
        target.mkdir(parents=True, exist_ok=True)
        with open(target / f"rank-{self.rank}-stacks.txt", "w") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
        trace = nccl_trace()
        if trace is not None:
            (target / f"rank-{self.rank}-nccl-trace.pkl").write_bytes(trace)


def nccl_trace() -> Optional[bytes]:
    """The NCCL flight recorder's entries where torch has one and NCCL is the process group's backend."""
    try:
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d
        if not dist.is_initialized() or dist.get_backend() != "nccl" or not hasattr(c10d, "_dump_nccl_trace"):
            return None
        return c10d._dump_nccl_trace()
    except Exception:  # a recorder that cannot dump must not end the thread that watches this rank
        return None


def _replace(path: Path, text: str) -> None:
    """Write atomically: the watchdog reads whole lines, never a half-written one."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def start(trainer) -> Optional[Heartbeat]:
    """Start this rank's heartbeat at train start (once per process); None outside a run directory, and for packed
    independent tasks, which share one run directory and would each write the same rank-0 file."""
    run_dir = os.environ.get("CT_RUN_DIR")
    if not run_dir or os.environ.get("CT_LAUNCH") == "independent":
        return None
    if _beat:
        _beat[0].step, _beat[0].progress_time, _beat[0].training = trainer.global_step, time.time(), True
    else:
        interval = float(os.environ.get("CT_HEARTBEAT_S") or 5)
        _beat.append(Heartbeat(Path(run_dir) / "logs" / "progress", trainer.global_rank, interval,
                               trainer.global_step))
        _beat[0].power = gpu_power.meter(run_dir, trainer.global_rank)
    _beat[0].start()
    if _beat[0] not in trainer.callbacks:
        trainer.callbacks.append(_beat[0])
    return _beat[0]


def note_progress() -> None:
    """A checkpoint save ended (cluster_train/image/checkpoint_io.py): that is progress too."""
    if _beat:
        _beat[0].note_progress()
