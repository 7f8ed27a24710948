"""Distributed strategy registry: a name in the config -> a Lightning strategy object (or name).

Every constructor takes (accelerator, trainer=None): the resolved accelerator name and the TrainerConfig.
DeepSpeed configurations are JSON files beside this module (package data), one per ZeRO variant.
"""
import json
import os
from pathlib import Path

from train.errors import UserError
from train.registry import Registry

STRATEGIES = Registry("strategy")
PRECISIONS = ("32", "16-mixed", "bf16-mixed")
DEEPSPEED_CONFIGS = Path(__file__).resolve().parent / "deepspeed"


def check_precision(precision: str) -> str:
    if str(precision) not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")
    return str(precision)


@STRATEGIES.register("ddp")
def ddp(accelerator: str, trainer=None):
    from pytorch_lightning.strategies import DDPStrategy

    # gloo on CPU (tests, the local cluster), NCCL on GPUs; Lightning picks the backend per accelerator.
    return DDPStrategy(process_group_backend="gloo" if accelerator == "cpu" else None)


@STRATEGIES.register("single")
def single(accelerator: str, trainer=None):
    return "auto"


@STRATEGIES.register("fsdp")
def fsdp(accelerator: str, trainer=None):
    if accelerator == "cpu":
        # Lightning's FSDPStrategy refuses the CPU; FSDP2 through ModelParallelStrategy is the nearest real path.
        import torch
        from pytorch_lightning.strategies import ModelParallelStrategy

        if tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 7):
            # measured: torch 2.6's FSDP2 all-gather calls Stream.record_event, which CPU streams lack there
            raise UserError(f"strategy 'fsdp' on CPU needs torch >= 2.7 (this is torch {torch.__version__}); "
                            f"use ddp or zero3 on CPU, or fsdp on GPUs")

        ranks = trainer.devices * trainer.num_nodes if trainer is not None else "auto"  # "auto" means one per node
        return ModelParallelStrategy(data_parallel_size=ranks, tensor_parallel_size=1)
    from pytorch_lightning.strategies import FSDPStrategy

    return FSDPStrategy(sharding_strategy="FULL_SHARD")


def deepspeed_config(name: str, trainer=None) -> dict:
    """The JSON file's settings plus the run's options; Lightning fills batch size, accumulation, clipping, precision."""
    config = json.loads((DEEPSPEED_CONFIGS / f"{name}.json").read_text())
    # Precision has one source of truth, trainer.precision: the file's bf16/fp16 block is its recommendation only.
    config.pop("bf16", None)
    config.pop("fp16", None)
    if trainer is not None and getattr(trainer, "flops_profiler", False):
        config["flops_profiler"] = {"enabled": True, "profile_step": 2, "detailed": False, "output_file": None}
    return config


def _deepspeed(name: str, accelerator: str, trainer=None):
    if accelerator == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is first imported
    from train.strategies.cpu_deepspeed import DeepSpeedAnyAccelerator

    return DeepSpeedAnyAccelerator(
        config=deepspeed_config(name, trainer), process_group_backend="gloo" if accelerator == "cpu" else None
    )


for _name in ("zero1", "zero2", "zero2_offload", "zero3", "zero3_offload"):
    STRATEGIES.register(_name)(lambda accelerator, trainer=None, _n=_name: _deepspeed(_n, accelerator, trainer))


def apply_fsdp2(module, device_mesh) -> None:
    """Shard every parameter-holding leaf module, then the root, with FSDP2 (ModelParallelStrategy's contract)."""
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6 public path
    except ImportError:  # pragma: no cover - older torch
        from torch.distributed._composable.fsdp import fully_shard
    mesh = device_mesh["data_parallel"]
    for child in module.modules():
        if child is not module and any(True for _ in child.parameters(recurse=False)):
            fully_shard(child, mesh=mesh)
    fully_shard(module, mesh=mesh)
