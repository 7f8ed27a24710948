"""GPU speed by default, and the answer to "is this run input-bound?".

- precision `auto`: bf16-mixed on a GPU that has bf16 (compute capability >= 8.0), else 32-bit. An explicit
  bf16-mixed on a GPU without bf16 ends the run with one line (preflight refuses it earlier where the partition's
  gpu_type is known).
- channels_last (on by default, GPUs only): the convolution weights of any model with Conv2d/Conv3d layers are stored
  channels-last (NHWC/NDHWC), which Tensor Cores run without transposes; cuDNN then picks channels-last kernels for
  the inputs too. Under DeepSpeed the weights stay contiguous (ZeRO flattens and broadcasts them as bytes, which a
  channels-last weight cannot be viewed as: every ZeRO run on a GPU failed at its start, H200, 2026-11-26) and each
  convolution's input is made channels-last instead, which cuDNN follows the same way.
  The CPU keeps NCHW: torch's CPU backward of a channels-last ResNet crashed (double free) in torch 2.13.
- compile: `torch.compile` of the LightningModule's submodules in place (nn.Module.compile, so checkpoint keys stay
  the same); the strategies it cannot work under are refused before anything runs
  (cluster_train.image.strategies.check_compile).
- cuda_graphs: CUDA graphs where the step is bound by kernel launches (cluster_train/image/cuda_graphs.py).
- InputWait: the time the training loop waits for its next batch against the whole step, per rank.
- HostMemory (cluster_train/image/pss.py): the peak host memory of each rank and of its dataloader workers, gathered
  over ranks: what a job's ranks and workers took, which preflight budgets for the experiment's next job.
- StepTimes (cluster_train/image/step_times.py): each rank's step-time spread, gathered, and the straggler named.
"""
import dataclasses
import os
import time

import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.strategies import DeepSpeedStrategy

from cluster_train.shared.config import TrainerConfig
from cluster_train.shared.errors import UserError
from cluster_train.image.cuda_graphs import CudaGraphs, compile_for_graphs
from cluster_train.image.pss import HostMemory, host_memory_facts
from cluster_train.image.step_times import StepTimes, step_time_facts

BF16_CAPABILITY = (8, 0)  # Ampere: A100, A10, A40, L40S, H100, H200
GPU_ACCELERATORS = ("gpu", "cuda")  # trainer.accelerator's names for the GPU (auto resolves to "gpu")
INPUT_BOUND = 0.10  # waiting for data more than a tenth of the training time: the GPU idles for the input pipeline


def resolved(t: TrainerConfig, accelerator: str) -> TrainerConfig:
    """The trainer config with `auto` precision and channels_last made concrete for this process's device."""
    return dataclasses.replace(t, precision=precision_for(t.precision, accelerator),
                               channels_last=t.channels_last and accelerator in GPU_ACCELERATORS)


def precision_for(precision: str, accelerator: str) -> str:
    gpu = accelerator in GPU_ACCELERATORS
    bf16 = gpu and torch.cuda.get_device_capability() >= BF16_CAPABILITY
    if precision == "auto":
        return "bf16-mixed" if bf16 else "32"
    if precision == "bf16-mixed" and gpu and not bf16:
        name, (major, minor) = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
        raise UserError(f"trainer.precision=bf16-mixed but the {name} (compute capability {major}.{minor}) has no "
                        f"bf16; set trainer.precision=16-mixed, 32 or auto")
    return precision


def speed_callbacks(t: TrainerConfig, accelerator: str) -> list:
    """The callbacks every Trainer of a run carries (t: resolved for this device)."""
    gpu = accelerator in GPU_ACCELERATORS
    if t.cuda_graphs == "always" and not gpu:
        raise UserError(f"trainer.cuda_graphs=always but this run has no GPU (accelerator {accelerator}); "
                        f"set trainer.cuda_graphs=auto, or run it on a GPU partition")
    graphs = CudaGraphs(t.cuda_graphs, t.strategy, t.accumulate_grad_batches, t.compile, gpu)
    return [FastLayout(t.channels_last, t.compile, graphs=t.cuda_graphs == "always"), graphs, InputWait(),
            HostMemory(), StepTimes()]


class FastLayout(Callback):
    """Channels-last convolutions and torch.compile, applied once before the strategy wraps the module."""

    def __init__(self, channels_last: bool, compile: bool, graphs: bool = False):
        self.channels_last, self.compile, self.graphs = channels_last, compile, graphs
        self.converted = 0  # convolution layers run channels-last

    def setup(self, trainer, pl_module, stage):
        if getattr(pl_module, "_ct_fast_layout", False):  # validate, then fit: the same module once
            return
        pl_module._ct_fast_layout = True
        if self.channels_last:
            zero = isinstance(trainer.strategy, DeepSpeedStrategy)
            self.converted = channels_last_inputs(pl_module) if zero else to_channels_last(pl_module)
        if self.graphs:
            compile_for_graphs(pl_module)
        elif self.compile:
            for child in pl_module.children():
                child.compile()


def to_channels_last(module: torch.nn.Module) -> int:
    """Convolution weights to channels-last in place (Module.to(memory_format=...) refuses models mixing 2D and 3D)."""
    layers = convolutions(module)
    for layer, layout in layers:
        layer.weight.data = layer.weight.data.contiguous(memory_format=layout)
    return len(layers)


def channels_last_inputs(module: torch.nn.Module) -> int:
    """Each convolution's input made channels-last as it arrives
    (a no-op once the activations are), weights untouched."""
    layers = convolutions(module)
    for layer, layout in layers:
        layer.register_forward_pre_hook(_input_layout(layout))
    return len(layers)


def convolutions(module: torch.nn.Module) -> list:
    """(layer, its channels-last memory format) for every 2D and 3D convolution of the module."""
    formats = {torch.nn.Conv2d: torch.channels_last, torch.nn.Conv3d: torch.channels_last_3d}
    return [(layer, formats[type(layer)]) for layer in module.modules() if type(layer) in formats]


def _input_layout(layout):
    def hook(layer, args):
        return (args[0].contiguous(memory_format=layout), *args[1:])
    return hook


class InputWait(Callback):
    """Host time between one training step's end and the next one's start (fetching the batch; on GPUs the queued
    kernels keep running meanwhile) against the whole training time. Validation and epoch ends are left out."""

    def __init__(self):
        self.wait_s = self.step_s = 0.0
        self.steps = 0
        self.epochs = {}  # epoch -> [samples, seconds of waiting and stepping]: the throughput
        self._ready = None  # when the loop began waiting for the next batch; None while not training

    def on_train_epoch_start(self, trainer, pl_module):
        self._ready = time.perf_counter()  # the epoch's first batch: worker start-up counts as waiting

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        now = time.perf_counter()
        if self._ready is not None:
            self.wait_s += now - self._ready
            self._tally(trainer)[1] += now - self._ready
        self._started = now

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._ready = time.perf_counter()
        self.step_s += self._ready - self._started
        self.steps += 1
        self._tally(trainer)[0] += batch_size(batch)
        self._tally(trainer)[1] += self._ready - self._started

    def _tally(self, trainer) -> list:
        """This epoch's figures (a run resumed mid-epoch starts counting within it)."""
        return self.epochs.setdefault(trainer.current_epoch, [0, 0.0])

    def on_validation_start(self, trainer, pl_module):
        self._ready = None

    def on_validation_end(self, trainer, pl_module):
        if trainer.training:
            self._ready = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        self._ready = None

    def summary(self, num_workers: int) -> dict:
        total = self.wait_s + self.step_s
        fraction = self.wait_s / total if total else 0.0
        return {"steps": self.steps, "data_wait_s": round(self.wait_s, 2), "compute_s": round(self.step_s, 2),
                "wait_fraction": round(fraction, 3), "input_bound": fraction > INPUT_BOUND,
                "num_workers": num_workers, "data_from": data_source()}

    def throughput(self, world_size: int) -> dict:
        """Samples per second over all ranks (each trains its own batches), from the epochs after the first (worker
        start-up, cuDNN's autotuning and compilation fall in the first); from the first where it is the only one."""
        epochs = list(self.epochs.values())
        measured = epochs[1:] or epochs
        samples, seconds = sum(e[0] for e in measured), sum(e[1] for e in measured)
        per_rank = samples / seconds if seconds else 0.0
        return {"samples_per_s": round(per_rank * world_size, 2), "samples_per_s_per_rank": round(per_rank, 2),
                "epochs_measured": len(measured), "world_size": world_size}


def data_source() -> str:
    """Where the loop's data came from: a data image bound read-only where it is stored (image), its copy on the
    node's local disk (staged), as the job's shell chose per node (CT_DATA_FROM); else a directory."""
    return os.environ.get("CT_DATA_FROM") or "directory"


def batch_size(batch) -> int:
    """The number of samples in a batch: the first dimension of its first tensor (tuple, list or dict batches)."""
    while isinstance(batch, (list, tuple, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return int(batch.shape[0]) if hasattr(batch, "shape") and len(batch.shape) else 1


def speed_facts(trainer, num_workers: int) -> dict:
    """For results.json: the precision, layout and compile the run trained with, its input wait (this rank) and its
    host memory (every rank's: a collective, which every task calls on every rank)."""
    layout = next(c for c in trainer.callbacks if isinstance(c, FastLayout))
    wait = next(c for c in trainer.callbacks if isinstance(c, InputWait)).summary(num_workers)
    if wait["input_bound"] and trainer.is_global_zero:
        print(f"[cluster-train] input-bound: the training loop waited for data {wait['wait_fraction']:.0%} of the "
              f"time; raise data.num_workers ({num_workers} now) or make the data set faster to read", flush=True)
    return {"precision": str(trainer.precision), "channels_last_layers": layout.converted,
            "compiled": layout.compile, "input": wait,
            "cuda_graphs": next(c for c in trainer.callbacks if isinstance(c, CudaGraphs)).facts(),
            "throughput": next(c for c in trainer.callbacks if isinstance(c, InputWait)).throughput(trainer.world_size),
            "host_memory": host_memory_facts(trainer, num_workers), "step_times": step_time_facts(trainer)}
