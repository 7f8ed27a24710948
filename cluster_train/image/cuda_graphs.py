"""CUDA graphs for steps bound by kernel launches (`trainer.cuda_graphs`).

A small model at a small batch spends its step on the host launching kernels while the GPU idles: MobileNet-v3-Small
at seed 002's batch of 32 on an H200 issued ~16-28 ms of launches for a few ms of GPU work (benchmarks/README.md).
Replaying the step as CUDA graphs launches it as one. torch.compile(mode="reduce-overhead") records and replays them
(CUDA graph trees), in place on the LightningModule's submodules as `trainer.compile` does, so checkpoint keys stay.

- auto (default): on a GPU, under single or ddp, one batch per optimizer step and `trainer.compile` off, PROBE steps
  after SKIP are timed twice each: until the host has issued the step, and until the GPU has run it. Where the GPU
  ends within LAUNCH_BOUND of the host's issuing, it waited for the host: the step is launch-bound, and the model is
  compiled so. The step time decides, not the model's name. Logging steps (which wait for the GPU) are not probed.
- always: compiled so at setup, no probing (trainer.compile: true then uses this mode).
- never: eager (or `trainer.compile`'s default mode).
The decision and its figures go into results.json (speed.cuda_graphs).
"""
import statistics
import time

import torch
from pytorch_lightning.callbacks import Callback

from cluster_train.image.lit import logging_step

SKIP = 3  # cuDNN's autotuning and the allocator's first growth fall in the first steps
PROBE = 5
LAUNCH_BOUND = 0.85  # the host issued for at least this share of the step: the GPU had nothing queued ahead
GRAPH_STRATEGIES = ("single", "ddp")  # the others shard or hook parameters in ways graphs cannot replay
MODE = "reduce-overhead"


def launch_bound(issue_s: list, step_s: list) -> bool:
    """Whether the host's issuing took most of each step (medians of the probed steps)."""
    return statistics.median(i / s for i, s in zip(issue_s, step_s) if s > 0) >= LAUNCH_BOUND


def compile_for_graphs(pl_module) -> None:
    for child in pl_module.children():
        child.compile(mode=MODE)


class CudaGraphs(Callback):
    def __init__(self, setting: str, strategy: str, accumulate: int, compiled: bool, gpu: bool):
        self.setting = setting
        self.why_not = _why_not(setting, strategy, accumulate, compiled, gpu)
        self.issue_s, self.step_s = [], []
        self.used = setting == "always"
        self._seen = 0

    @property
    def probing(self) -> bool:
        return self.why_not is None and self.setting == "auto" and len(self.step_s) < PROBE

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._seen += 1
        self._t0 = None
        if self.probing and self._seen > SKIP and not logging_step(trainer):
            torch.cuda.synchronize()
            self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._t0 is None:
            return
        issued = time.perf_counter()
        torch.cuda.synchronize()
        self.issue_s.append(issued - self._t0)
        self.step_s.append(time.perf_counter() - self._t0)
        if len(self.step_s) == PROBE:
            # every rank decides alike: one rank compiling alone would only skew the ranks' pace, but say one thing
            self.used = trainer.strategy.reduce_boolean_decision(launch_bound(self.issue_s, self.step_s), all=True)
            if self.used:
                compile_for_graphs(pl_module)

    def facts(self) -> dict:
        issue, step = (statistics.median(v) * 1000 if v else None for v in (self.issue_s, self.step_s))
        return {"setting": self.setting, "used": self.used, "why_not": self.why_not,
                "probed_steps": len(self.step_s),
                "host_issue_ms": round(issue, 2) if issue else None, "step_ms": round(step, 2) if step else None}


def _why_not(setting: str, strategy: str, accumulate: int, compiled: bool, gpu: bool):
    """Why graphs are not tried under `auto` (None: they are); `always` was checked by the config."""
    if setting != "auto":
        return None if setting == "always" else "trainer.cuda_graphs=never"
    if not gpu:
        return "no GPU"
    if strategy not in GRAPH_STRATEGIES:
        return f"strategy {strategy}"
    if accumulate > 1:  # a graph's gradients are overwritten by its next replay, not accumulated into
        return f"accumulate_grad_batches={accumulate}"
    if compiled:
        return "trainer.compile=true (set trainer.cuda_graphs=always for its graphs)"
    return None
