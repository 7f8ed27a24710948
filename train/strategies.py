"""Distributed strategy registry: a name in the config -> a Lightning strategy object (or name)."""
from train.registry import Registry

STRATEGIES = Registry("strategy")


@STRATEGIES.register("ddp")
def ddp(accelerator: str):
    from pytorch_lightning.strategies import DDPStrategy

    # gloo on CPU (tests, the local cluster), NCCL on GPUs; Lightning picks the backend per accelerator.
    return DDPStrategy(process_group_backend="gloo" if accelerator == "cpu" else None)


@STRATEGIES.register("single")
def single(accelerator: str):
    return "auto"
