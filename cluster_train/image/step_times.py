"""Each rank's step-time spread and the straggler among them (results.json `step_times`).

A rank's step is timed where no collective makes it wait for the others: its model's forward pass, host time from
the first forward of a submodule of the LightningModule to `on_before_backward`. The whole step would not do: DDP's
gradient all-reduce and Lightning's per-step agreement make every rank wait for the slowest, so every rank's
batch-to-batch time comes out the same (measured: 2 gloo ranks, one slowed by 0.3 s a step, both ~0.32 s). No GPU
synchronisation: on a GPU this is the host's time (a busy or slow CPU, Python overhead), not the kernels'. A compiled
submodule (trainer.compile; cuda_graphs once it compiles) has no hook, which its graph would trace: a compiled model
is left untimed.

A rank is a straggler when its median is at least STRAGGLER_RATIO times the median of all ranks' medians (with 2 ranks
or more); the slowest such rank is named, with its host.
"""
import socket
import statistics
import time

from pytorch_lightning.callbacks import Callback

from cluster_train.image.pss import gathered

STRAGGLER_RATIO = 1.25


class StepTimes(Callback):
    def __init__(self):
        self.seconds = []  # one per training step of this process
        self._stepping = False  # between a training batch's start and its backward
        self._forward = None  # when this step's forward began
        self._hooks = {}  # submodule -> its hook's handle

    def on_train_start(self, trainer, pl_module):
        self._hooks = {child: child.register_forward_pre_hook(self._forward_begins) for child in pl_module.children()}
        self._unhook_compiled()

    def on_train_end(self, trainer, pl_module):
        for handle in self._hooks.values():
            handle.remove()
        self._hooks = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._unhook_compiled()  # trainer.cuda_graphs compiles the model after its first steps
        self._stepping, self._forward = True, None

    def _unhook_compiled(self):
        for child in [c for c in self._hooks if getattr(c, "_compiled_call_impl", None) is not None]:
            self._hooks.pop(child).remove()

    def _forward_begins(self, module, args):
        if self._stepping and self._forward is None:
            self._forward = time.perf_counter()

    def on_before_backward(self, trainer, pl_module, loss):
        if self._stepping and self._forward is not None:
            self.seconds.append(time.perf_counter() - self._forward)
        self._stepping = False

    def figures(self, rank: int) -> dict:
        ordered = sorted(self.seconds)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else None
        return {"rank": rank, "host": socket.gethostname(),
                "median_ms": ms(statistics.median(ordered)) if ordered else None, "p90_ms": ms(p90),
                "steps": len(ordered)}


def ms(seconds):
    return None if seconds is None else round(seconds * 1000, 3)


def straggler(ranks: list):
    """{"rank", "host", "times"} of the slowest rank at least STRAGGLER_RATIO x the median of the ranks' medians;
    None with fewer than 2 timed ranks or no such rank."""
    timed = [r for r in ranks if r.get("median_ms")]
    if len(timed) < 2:
        return None
    typical = statistics.median(r["median_ms"] for r in timed)
    slowest = max(timed, key=lambda r: r["median_ms"])
    times = slowest["median_ms"] / typical
    return {"rank": slowest["rank"], "host": slowest["host"], "times": round(times, 2)} \
        if times >= STRAGGLER_RATIO else None


def step_time_facts(trainer) -> dict:
    """For results.json: every rank's figures, gathered (a collective: every rank calls this), and the straggler."""
    mine = next(c for c in trainer.callbacks if isinstance(c, StepTimes)).figures(trainer.global_rank)
    ranks = gathered(mine, trainer.world_size)
    return {"ranks": ranks, "straggler": straggler(ranks)}
