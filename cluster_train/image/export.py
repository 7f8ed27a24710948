"""Export a checkpoint from any strategy to one plain weights file that loads into the bare model without DeepSpeed.

Handles a Lightning checkpoint file (single, ddp, fsdp: FSDPStrategy gathers the full state dict) and a DeepSpeed
checkpoint directory (zero*).
"""
import tempfile
from pathlib import Path
from typing import Dict, Union

import torch

from cluster_train.shared.errors import UserError

PREFIX = "model."  # cluster_train.image.lit.Classifier keeps the network as self.model


def full_state_dict(checkpoint: Union[str, Path]) -> Dict[str, torch.Tensor]:
    """The consolidated LightningModule state dict of a checkpoint file or a sharded checkpoint directory."""
    path = Path(checkpoint)
    if not path.exists():
        raise UserError(f"checkpoint {str(path)!r} does not exist")
    if path.is_file():
        return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    with tempfile.TemporaryDirectory() as tmp:
        single = Path(tmp) / "full.ckpt"
        if (path / "latest").is_file():  # DeepSpeed ZeRO: gather the fp32 partitions
            from pytorch_lightning.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

            convert_zero_checkpoint_to_fp32_state_dict(str(path), str(single))
            return torch.load(single, map_location="cpu", weights_only=False)["state_dict"]
    raise UserError(f"checkpoint {str(path)!r} is a directory but not a DeepSpeed checkpoint")


def export_weights(checkpoint: Union[str, Path], out: Union[str, Path]) -> Path:
    """Write the network's plain state dict (keys as in the bare model) to `out`; returns the path."""
    state = full_state_dict(checkpoint)
    weights = {k[len(PREFIX):]: v.detach().float().cpu().clone() for k, v in state.items() if k.startswith(PREFIX)}
    if not weights:
        raise UserError(f"checkpoint {str(checkpoint)!r} holds no '{PREFIX}*' weights")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out)
    return out
