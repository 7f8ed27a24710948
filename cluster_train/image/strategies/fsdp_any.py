"""Lightning's FSDPStrategy (torch FSDP, FULL_SHARD) made to run on CPU too, so the CPU tests train the class GPUs use.

Written by hand because Lightning refuses FSDP on the CPU and passes torch's FSDP what only suits GPUs there: no
device id (torch then looks for an accelerator and raises) and offload_to_cpu for full state dicts (torch 2.6 then
reads a freed CPU buffer and crashes). On every device it also clips by norm, which Lightning's FSDPPrecision refuses:
FSDP shards the gradients, so only the wrapped module's clip_grad_norm_ sees the global norm.
"""
import contextlib

import pytorch_lightning.strategies.fsdp as lightning_fsdp
from lightning_fabric.connector import _convert_precision_to_unified_args
from pytorch_lightning.plugins.precision import FSDPPrecision
from pytorch_lightning.strategies import FSDPStrategy


class FSDPNormClipping(FSDPPrecision):
    fsdp_module = None  # set by FSDPAnyAccelerator.setup once the model is wrapped

    def clip_grad_by_norm(self, optimizer, clip_val) -> None:
        self.fsdp_module.clip_grad_norm_(clip_val)


class FSDPAnyAccelerator(FSDPStrategy):
    strategy_name = "fsdp_any_accelerator"

    def __init__(self, precision: str = "32", **kwargs):
        # a strategy's own plugin overrides the Trainer's precision, so the registry passes trainer.precision here
        plugin = FSDPNormClipping(_convert_precision_to_unified_args(precision))  # "32" -> "32-true"
        super().__init__(precision_plugin=plugin, **kwargs)

    _wrapped = None  # (module, its FSDP wrapper) from an earlier stage of this Trainer

    def _setup_model(self, model):
        from torch.distributed.fsdp import FullyShardedDataParallel

        # A second stage (`validate`, then `fit`) would wrap a module whose parameters FSDP already manages: the new
        # wrapper gets none (so a full checkpoint cannot load on another rank count); the first one is reused.
        if self._wrapped is not None and self._wrapped[0] is model:
            return self._wrapped[1]
        module = model
        if self.root_device.type == "cpu" and not isinstance(model, FullyShardedDataParallel):
            model = FullyShardedDataParallel(
                module=model, cpu_offload=self.cpu_offload, mixed_precision=self.mixed_precision_config,
                sharding_strategy=self.sharding_strategy, device_id=self.root_device, **self.kwargs,
            )
        wrapped = super()._setup_model(model)  # wraps what is not wrapped yet, moves metrics, activation checkpointing
        self._wrapped = (module, wrapped)
        return wrapped

    def setup(self, trainer) -> None:
        super().setup(trainer)
        self.precision_plugin.fsdp_module = self.model

    def lightning_module_state_dict(self):
        with self._full_state_dict_in_place():
            return super().lightning_module_state_dict()

    def optimizer_state(self, optimizer):
        with self._full_state_dict_in_place():
            return super().optimizer_state(optimizer)

    def load_checkpoint(self, checkpoint_path, weights_only=None):
        with self._full_state_dict_in_place():
            return super().load_checkpoint(checkpoint_path, weights_only)

    @contextlib.contextmanager
    def _full_state_dict_in_place(self):
        """On CPU, gather full state dicts without offload_to_cpu (they are on the CPU already)."""
        original = lightning_fsdp._get_full_state_dict_context
        if self.root_device.type == "cpu":
            lightning_fsdp._get_full_state_dict_context = _full_state_dict_without_offload
        try:
            yield
        finally:
            lightning_fsdp._get_full_state_dict_context = original


@contextlib.contextmanager
def _full_state_dict_without_offload(module, world_size: int, rank0_only: bool = True):
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.state_dict_type(
        module=module, state_dict_type=StateDictType.FULL_STATE_DICT,
        state_dict_config=FullStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only),
        optim_state_dict_config=FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only),
    ):
        yield
