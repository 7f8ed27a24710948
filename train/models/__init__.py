"""Model registry: `MODELS.build(name, num_classes=..., **params)`; importing a family registers it.

Image models take (B, C, H, W); video models take clips shaped (B, T, C, H, W) and say so with
`@takes(VIDEO_INPUT)`, so tests and `python -m train models` can build an example input for any name.
"""
from typing import Tuple

from train.registry import Registry

MODELS = Registry("model")

IMAGE_INPUT = (3, 32, 32)  # (C, H, W): CIFAR-sized
VIDEO_INPUT = (8, 3, 32, 32)  # (T, C, H, W): the generated UFC-10 clips


def takes(shape: Tuple[int, ...]):
    """Record the per-sample input shape a registered constructor's model expects (default IMAGE_INPUT)."""

    def mark(fn):
        fn.input_shape = tuple(shape)
        return fn

    return mark


def input_shape(name: str) -> Tuple[int, ...]:
    return getattr(MODELS.get(name), "input_shape", IMAGE_INPUT)


from train.models import (  # noqa: E402,F401  (register their models)
    action_recognition, densenet_cifar, resnet_cifar, resnext_cifar, video_fusion, wide_resnet_cifar,
)
