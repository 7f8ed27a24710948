"""Peak host memory of each rank and of its dataloader workers, measured, for results.json and `probe-data`: what
preflight then budgets per rank and per worker instead of the stated data.rank_mem_gb and data.worker_mem_gb.

Proportional set size (PSS, /proc/<pid>/smaps_rollup): a page shared by N processes counts 1/N in each, so the
forked workers and their rank, which share the data set's copy-on-write pages, add up to what they take of the node
(resident set sizes would count the shared pages once per process). A thread samples the rank and its workers (its
child processes that torch names `pt_data_worker`, found through /proc/<pid>/task/*/children) every INTERVAL_S,
from fit start to fit end, and once more at the first batch of each training and validation epoch, so even short-
lived workers are seen once; a peak between two samples can still be missed, and so can a worker that lives shorter
than an interval outside those first batches. Torch before 2.1 (the cuda11.6 image) does not name its workers:
there they are not measured (workers_seen 0), and preflight keeps the stated per-worker figure.
"""
import os
import threading
from pathlib import Path
from typing import Dict, List, Optional

from pytorch_lightning.callbacks import Callback

INTERVAL_S = 0.25
WORKER_NAME = "pt_data_worker"  # torch's name for a dataloader worker process (/proc/<pid>/comm)
KB_PER_GB = 1024 * 1024  # smaps counts kB


def pss_kb(pid: int) -> int:
    """A process's PSS in kB; 0 once it has ended. smaps_rollup is Linux 4.14+; older kernels sum smaps."""
    for name in ("smaps_rollup", "smaps"):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                return sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError):  # ended while being read
            return 0
    return 0


def workers_of(pid: int) -> List[int]:
    """The dataloader workers among a process's children (not a rank Lightning started, nor a compile worker)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:  # the thread ended
            continue
        found += [int(child) for child in children if _name(child) == WORKER_NAME]
    return found


def _name(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class PeakPss:
    """The peaks of one process and of each of its workers, sampled from a daemon thread between start() and stop()."""

    def __init__(self, pid: Optional[int] = None):
        self.pid = pid or os.getpid()
        self.own_kb = self.total_kb = 0  # the process alone; it and its workers in one sample
        self.workers: Dict[int, int] = {}  # worker pid -> its peak
        self._lock, self._stop, self._thread = threading.Lock(), threading.Event(), None

    def sample(self) -> None:
        workers = {pid: pss_kb(pid) for pid in workers_of(self.pid)}
        own = pss_kb(self.pid)
        with self._lock:
            self.own_kb = max(self.own_kb, own)
            self.total_kb = max(self.total_kb, own + sum(workers.values()))
            for pid, kb in workers.items():
                self.workers[pid] = max(self.workers.get(pid, 0), kb)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ct-pss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.sample()
        while not self._stop.wait(INTERVAL_S):
            self.sample()

    @property
    def sampling(self) -> bool:
        return self._thread is not None

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def figures(self) -> dict:
        seen = [kb for kb in self.workers.values() if kb]
        return {"peak_gb": gb(self.own_kb), "worker_peak_gb": gb(max(seen)) if seen else None,
                "total_peak_gb": gb(self.total_kb), "workers_seen": len(seen)}


def gb(kb: int) -> float:
    return round(kb / KB_PER_GB, 3)


class HostMemory(Callback):
    """PeakPss of this rank from fit start to fit end (every Trainer of a run carries one:
    cluster_train/image/speed.py)."""

    def __init__(self):
        self.peaks = PeakPss()

    def on_fit_start(self, trainer, pl_module):
        self.peaks = PeakPss()  # here, in the rank's own process (a launcher may build the Trainer elsewhere)
        self.peaks.start()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:  # the batch came from a worker: the epoch's workers are alive now
            self.peaks.sample()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if batch_idx == 0 and self.peaks.sampling:  # within fit (a validate() alone is not measured)
            self.peaks.sample()

    def on_fit_end(self, trainer, pl_module):
        self.peaks.stop()

    def on_exception(self, trainer, pl_module, exception):
        self.peaks.stop()


def host_memory_facts(trainer, num_workers: int) -> dict:
    """For results.json: every rank's peaks, gathered (a collective: every rank calls this), and their maxima."""
    mine = {"rank": trainer.global_rank,
            **next(c for c in trainer.callbacks if isinstance(c, HostMemory)).peaks.figures()}
    ranks = gathered(mine, trainer.world_size)
    workers = [r["worker_peak_gb"] for r in ranks if r["worker_peak_gb"] is not None]
    return {"measure": "pss", "num_workers": num_workers, "rank_peak_gb": max(r["peak_gb"] for r in ranks),
            "worker_peak_gb": max(workers) if workers else None, "sample_interval_s": INTERVAL_S, "ranks": ranks}


def gathered(mine: dict, world_size: int) -> List[dict]:
    import torch.distributed as dist

    if world_size < 2 or not (dist.is_available() and dist.is_initialized()):
        return [mine]
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return every
