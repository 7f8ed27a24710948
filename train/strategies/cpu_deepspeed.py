"""Lightning's DeepSpeedStrategy with only its CUDA-only checks relaxed, so ZeRO runs on CPU (gloo) in tests.

Written by hand because Lightning refuses the CPU in `setup_environment`, while DeepSpeed itself (DS_ACCELERATOR=cpu)
trains ZeRO 1/2/3 there; on GPUs it behaves as the parent class except for the gradient-accumulation fix in backward.
"""
import contextlib

from lightning_fabric.utilities.seed import reset_seed
from pytorch_lightning.accelerators import CPUAccelerator
from pytorch_lightning.strategies import DDPStrategy, DeepSpeedStrategy


class DeepSpeedAnyAccelerator(DeepSpeedStrategy):
    strategy_name = "deepspeed_any_accelerator"

    def setup_environment(self) -> None:
        if isinstance(self.accelerator, CPUAccelerator):
            DDPStrategy.setup_environment(self)  # skip only the "only supported on CUDA GPUs" check
        else:
            super().setup_environment()

    def backward(self, closure_loss, *args, **kwargs):
        # Lightning divides the loss by accumulate_grad_batches and DeepSpeed's engine.backward divides it again
        # (measured: with accumulation 2, zero1 learnt at half the rate of plain training); undo Lightning's division.
        accumulate = self.lightning_module.trainer.accumulate_grad_batches
        return super().backward(closure_loss * accumulate, *args, **kwargs)

    def _initialize_deepspeed_train(self, *args, **kwargs):
        with _cpu_device_rank(self):
            return super()._initialize_deepspeed_train(*args, **kwargs)

    def _initialize_deepspeed_inference(self, *args, **kwargs):
        with _cpu_device_rank(self):
            return super()._initialize_deepspeed_inference(*args, **kwargs)

    def setup_distributed(self) -> None:
        if isinstance(self.accelerator, CPUAccelerator):  # CPU devices have no index to validate
            reset_seed()
            self.set_world_ranks()
            self._init_deepspeed_distributed()
        else:
            super().setup_distributed()


@contextlib.contextmanager
def _cpu_device_rank(strategy):
    """Lightning passes device_rank=root_device.index, which is None on CPU; DeepSpeed needs the local rank there."""
    import deepspeed

    original = deepspeed.initialize

    def initialize(*args, **kwargs):
        ns = kwargs.get("args")
        if ns is not None and getattr(ns, "device_rank", 0) is None:
            ns.device_rank = strategy.local_rank
        return original(*args, **kwargs)

    deepspeed.initialize = initialize
    try:
        yield
    finally:
        deepspeed.initialize = original
