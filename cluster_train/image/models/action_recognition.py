"""Seed 002's action-recognition models, on the same clips as seed 000: (B, T, C, H, W) -> (B, num_classes).

Image backbones (basic_cnn, vgg, mobilenet, mobilenet_finetuned, efficientnet) classify every frame and average
the logits over time; cnn_lstm reads per-frame features in order with an LSTM; ensemble averages its members'
class probabilities. The torchvision architectures are imported inside their constructors: the host test venv has
no CPU torchvision build, and this module must still import (and register every name) without it.
"""
from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn

from cluster_train.shared.errors import UserError
from cluster_train.shared.models import MODELS, VIDEO_INPUT, takes

# torchvision's own file name for the ImageNet weights of mobilenet_v3_small; copy it here (no network at run time).
DEFAULT_MOBILENET_WEIGHTS = "weights/mobilenet_v3_small-047dcff4.pth"

# Parameters holding names of other registries' entries (read by
# cluster_train.shared.registry without importing this module).
PARAM_NAMES = {"ensemble": {"members": "models", "member_params": "models"}}


class PerFrame(nn.Module):
    """Wrap an image classifier: run it on every frame, average the logits over the clip."""

    def __init__(self, image_model: nn.Module):
        super().__init__()
        self.image_model = image_model

    def forward(self, clips):
        b, t = clips.shape[:2]
        return self.image_model(clips.flatten(0, 1)).view(b, t, -1).mean(1)


def _basic_features(in_channels: int, width: int, pooled: int = 1) -> nn.Sequential:
    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(in_channels, width), block(width, 2 * width), block(2 * width, 4 * width),
                         nn.AdaptiveAvgPool2d(pooled), nn.Flatten())


@takes(VIDEO_INPUT)
def basic_cnn(num_classes: int = 10, width: int = 16, in_channels: int = 3) -> nn.Module:
    return PerFrame(nn.Sequential(_basic_features(in_channels, width), nn.Linear(4 * width, num_classes)))


class CnnLstm(nn.Module):
    def __init__(self, num_classes=10, width=16, hidden=64, in_channels=3):
        super().__init__()
        # A 4x4 map, not one pooled vector: the LSTM can only see motion if it knows where things are.
        self.features = _basic_features(in_channels, width, pooled=4)
        self.lstm = nn.LSTM(4 * width * 16, hidden, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, clips):
        b, t = clips.shape[:2]
        sequence, _ = self.lstm(self.features(clips.flatten(0, 1)).view(b, t, -1))
        return self.head(sequence[:, -1])  # the state after the last frame has seen the whole clip in order


@takes(VIDEO_INPUT)
def cnn_lstm(num_classes: int = 10, width: int = 16, hidden: int = 64) -> nn.Module:
    return CnnLstm(num_classes=num_classes, width=width, hidden=hidden)


@takes(VIDEO_INPUT)
def vgg(num_classes: int = 10, layers: Sequence = (16, "M", 32, "M", 64, 64, "M"), dropout: float = 0.3) -> nn.Module:
    """torchvision's VGG feature stack (with batch norm) in a CIFAR-sized configuration; torchvision's own VGG head
    expects 224-pixel inputs (512x7x7 -> 4096), so a small pooled head replaces it."""
    from torchvision.models.vgg import make_layers

    widths = [c for c in layers if c != "M"]
    image = nn.Sequential(make_layers(list(layers), batch_norm=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Dropout(dropout), nn.Linear(widths[-1], num_classes))
    return PerFrame(image)


@takes(VIDEO_INPUT)
def mobilenet(num_classes: int = 10, width_mult: float = 0.25) -> nn.Module:
    from torchvision.models import mobilenet_v3_small

    return PerFrame(mobilenet_v3_small(num_classes=num_classes, width_mult=width_mult))


@takes(VIDEO_INPUT)
def mobilenet_finetuned(num_classes: int = 10, weights_path: str = DEFAULT_MOBILENET_WEIGHTS,
                        freeze_features: bool = False) -> nn.Module:
    """mobilenet_v3_small from a local pretrained state_dict (torchvision's ImageNet file); a new classifier layer."""
    path = Path(weights_path)
    if not path.is_file():
        raise UserError(
            f"pretrained weights file {path} is missing; copy torchvision's mobilenet_v3_small-047dcff4.pth there "
            f"or set model.params.weights_path (weights are never downloaded at run time)"
        )
    from torchvision.models import mobilenet_v3_small

    net = mobilenet_v3_small()
    try:
        net.load_state_dict(torch.load(path, map_location="cpu"))
    except (RuntimeError, KeyError) as err:
        raise UserError(f"{path} is not a mobilenet_v3_small state_dict: {str(err).splitlines()[0]}") from None
    if freeze_features:
        net.features.requires_grad_(False)
    net.classifier[-1] = nn.Linear(net.classifier[-1].in_features, num_classes)
    return PerFrame(net)


@takes(VIDEO_INPUT)
def efficientnet(num_classes: int = 10, dropout: float = 0.2) -> nn.Module:
    from torchvision.models import efficientnet_b0

    return PerFrame(efficientnet_b0(num_classes=num_classes, dropout=dropout))


class Ensemble(nn.Module):
    def __init__(self, members):
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, clips):
        # Mean of probabilities, returned as log-probabilities so cross-entropy on it is the ensemble's NLL.
        probs = torch.stack([m(clips).softmax(-1) for m in self.members]).mean(0)
        return probs.clamp_min(1e-8).log()


@takes(VIDEO_INPUT)
def ensemble(num_classes: int = 10, members: Sequence[str] = ("basic_cnn", "cnn_lstm"),
             member_params=None) -> nn.Module:
    """Any registered video models (by name) trained jointly; member_params: {name: {param: value}}."""
    member_params = member_params or {}
    for name in members:
        if name == "ensemble":
            raise UserError("model.params.members cannot include 'ensemble' itself")
    return Ensemble([MODELS.build(n, num_classes=num_classes, **member_params.get(n, {})) for n in members])
