"""Measure, on this rank, the bytes of parameter and optimizer state that training actually holds.

Counts live tensors (deduplicated by storage): the module's parameters as stored on this rank (a DeepSpeed ZeRO-3
partition, an FSDP flat-parameter shard, or the whole tensor) and the innermost torch optimizer's parameters
(DeepSpeed's fp32 master partitions) and state (momentum, Adam moments).
"""
import resource

import torch


def _local(t: torch.Tensor) -> torch.Tensor:
    if hasattr(t, "ds_tensor"):  # DeepSpeed ZeRO-3: the rank keeps only its partition
        return t.ds_tensor
    return t


def _bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        t = _local(t)
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())
        if t.numel() and key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def base_optimizer(optimizer):
    while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


def state_bytes(module: torch.nn.Module, optimizer) -> dict:
    opt = base_optimizer(optimizer)
    params = list(module.parameters())
    master = [p for group in opt.param_groups for p in group["params"]]
    states = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
    param_ids = {(_local(p).untyped_storage().data_ptr()) for p in params}
    master = [p for p in master if _local(p).untyped_storage().data_ptr() not in param_ids]
    return {"param_bytes": _bytes(params), "master_bytes": _bytes(master), "optimizer_state_bytes": _bytes(states),
            "total_bytes": _bytes(params) + _bytes(master) + _bytes(states)}


def peak_host_mb() -> float:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
