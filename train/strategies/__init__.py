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
    from train.strategies.fsdp_any import FSDPAnyAccelerator

    # the same class on GPUs and on CPU (gloo), so the CPU tests prove what GPU jobs run
    return FSDPAnyAccelerator(
        precision=str(trainer.precision) if trainer is not None else "32", sharding_strategy="FULL_SHARD",
        process_group_backend="gloo" if accelerator == "cpu" else None,
    )


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

