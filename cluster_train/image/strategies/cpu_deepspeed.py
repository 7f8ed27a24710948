"""Lightning's DeepSpeedStrategy with only its CUDA-only checks relaxed, so ZeRO runs on CPU (gloo) in tests.

Written by hand because Lightning refuses the CPU in `setup_environment`, while DeepSpeed itself (DS_ACCELERATOR=cpu)
trains ZeRO 1/2/3 there; on GPUs it behaves as the parent class except for the gradient-accumulation fix in backward.
"""
import contextlib
from pathlib import Path

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

    def load_checkpoint(self, checkpoint_path, weights_only=None):
        saved = _saved_world_size(checkpoint_path)
        if saved is None or saved == self.world_size or not self.lightning_module.trainer.training:
            return super().load_checkpoint(checkpoint_path, weights_only)
        # DeepSpeed cannot re-partition ZeRO optimizer state for a new rank count: resume weights, epoch and step,
        # and let the optimizer state (momentum, moments) restart.
        print(f"[cluster-train] checkpoint written by {saved} ranks, resuming on {self.world_size}: weights, epoch and "
              "step restored, ZeRO optimizer state restarts (DeepSpeed cannot re-partition it)", flush=True)
        _, client_state = self.deepspeed_engine.load_checkpoint(
            checkpoint_path, load_optimizer_states=False, load_lr_scheduler_states=False,
            load_module_strict=self.lightning_module.strict_loading,
        )
        if self.zero_stage_3:  # its module file holds no weights: gather them from every rank's partition file
            _load_gathered_weights(self.deepspeed_engine, checkpoint_path)
        return client_state

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


def _load_gathered_weights(engine, checkpoint_path) -> None:
    """ZeRO-3: the fp32 weights of all partitions, loaded into this rank count's partitions and master copies."""
    import deepspeed
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    weights = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_path))
    params = dict(engine.module.named_parameters())
    with deepspeed.zero.GatheredParameters(list(params.values()), modifier_rank=0):
        for name, param in params.items():
            param.data.copy_(weights[name])
    engine.optimizer.refresh_fp32_params()  # the optimizer steps its fp32 partitions, not the parameters


def _saved_world_size(checkpoint_path):
    """The data-parallel size a DeepSpeed checkpoint directory was written with (None if it is not one)."""
    import torch

    path = Path(checkpoint_path)
    if not (path / "latest").is_file():
        return None
    # ZeRO-1/2 write mp_rank_00_model_states.pt; ZeRO-3 one zero_pp_rank_<r>_mp_rank_00_model_states.pt per rank
    states = sorted((path / (path / "latest").read_text().strip()).glob("*mp_rank_00_model_states.pt"))
    if not states:
        return None
    return torch.load(states[0], map_location="cpu", weights_only=False).get("dp_world_size")
