"""The strategy constructors STRATEGIES (cluster_train/shared/strategies.py)
names; each imports Lightning when called."""
import json
import os
from pathlib import Path

DEEPSPEED_CONFIGS = Path(__file__).resolve().parent / "deepspeed"


def ddp(accelerator: str, trainer=None):
    from pytorch_lightning.strategies import DDPStrategy

    # gloo on CPU (tests, the local cluster), NCCL on GPUs; Lightning picks the backend per accelerator.
    return DDPStrategy(process_group_backend="gloo" if accelerator == "cpu" else None)


def single(accelerator: str, trainer=None):
    return "auto"


def fsdp(accelerator: str, trainer=None):
    from cluster_train.image.strategies.fsdp_any import FSDPAnyAccelerator

    # the same class on GPUs and on CPU (gloo), so the CPU tests prove what GPU jobs run
    return FSDPAnyAccelerator(
        precision=str(trainer.precision) if trainer is not None else "32", sharding_strategy="FULL_SHARD",
        process_group_backend="gloo" if accelerator == "cpu" else None,
    )


def deepspeed_config(name: str, trainer=None) -> dict:
    """The JSON file's settings plus the run's options; Lightning
    fills batch size, accumulation, clipping, precision."""
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
    from cluster_train.image.strategies.cpu_deepspeed import DeepSpeedAnyAccelerator

    return DeepSpeedAnyAccelerator(
        config=deepspeed_config(name, trainer), process_group_backend="gloo" if accelerator == "cpu" else None
    )


def zero1(accelerator: str, trainer=None):
    return _deepspeed("zero1", accelerator, trainer)


def zero2(accelerator: str, trainer=None):
    return _deepspeed("zero2", accelerator, trainer)


def zero2_offload(accelerator: str, trainer=None):
    return _deepspeed("zero2_offload", accelerator, trainer)


def zero3(accelerator: str, trainer=None):
    return _deepspeed("zero3", accelerator, trainer)


def zero3_offload(accelerator: str, trainer=None):
    return _deepspeed("zero3_offload", accelerator, trainer)

