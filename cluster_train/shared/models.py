"""Model registry: `MODELS.build(name, num_classes=..., **params)`; a family's module is imported on first use.

Image models take (B, C, H, W); video models take clips shaped (B, T, C, H, W) and say so with
`@takes(VIDEO_INPUT)`, so tests and `python -m train models` can build an example input for any name. Models that are
not classifiers (seed 003's planner, seed 004's motion-token model) take several inputs or give several outputs, and
say how with `@describes_inputs(text, example_batch, loss)`: the generic model tests use `example_batch` and
`training_loss` for every name.
This module imports no torch: the login node checks `model.name` and `model.params` against MODELS.names() and
MODELS.params(name) (read from the source, see cluster_train/shared/registry.py).
"""
from typing import Tuple

from cluster_train.shared.registry import Registry

_AR = "cluster_train.image.models.action_recognition"
_VF = "cluster_train.image.models.video_fusion"

MODELS = Registry("model", {
    # seed 001's CIFAR experts
    "densenet_cifar": "cluster_train.image.models.densenet_cifar:densenet_cifar",
    "improved_wide_resnet": "cluster_train.image.models.wide_resnet_cifar:improved_wide_resnet",
    "resnet_cifar": "cluster_train.image.models.resnet_cifar:resnet_cifar",
    "resnext_cifar": "cluster_train.image.models.resnext_cifar:resnext_cifar",
    # seed 000's six video models, under the seed's class names (its users' files are models/<Model>_*.pth)
    **{name: f"{_VF}:{name}" for name in ("PerFrameAggregation2D", "LateFusion2D", "EarlyFusion2D",
                                          "PerFrameAggregation3D", "LateFusion3D", "EarlyFusion3D")},
    # seed 002's action recognition family
    **{name: f"{_AR}:{name}" for name in ("basic_cnn", "cnn_lstm", "vgg", "mobilenet", "mobilenet_finetuned",
                                          "efficientnet", "ensemble")},
    # seed 003's planner (num_classes: the trajectory vocabulary) and seed 004's motion-token model (the token set)
    "hydra_mdp": "cluster_train.image.models.trajectory_planner:hydra_mdp",
    "smart": "cluster_train.image.models.motion_tokens:smart",
}, fixed=("num_classes",))

# Seed 001's fusion heads: FusionNet builds them with the experts' feature sizes (cluster_train/image/models/fusion.py).
FUSION_HEADS = Registry("fusion head", {
    name: f"cluster_train.image.models.fusion:{cls}" for name, cls in (
        ("multiplicative", "Multiplicative"), ("multiplicativeAddition", "MultiplicativeAddition"),
        ("TransformerBase", "TransformerBase"), ("concatenation", "Concatenation"),
    )
}, fixed=("feature_dims", "num_classes"))

IMAGE_INPUT = (3, 32, 32)  # (C, H, W): CIFAR-sized
VIDEO_INPUT = (8, 3, 32, 32)  # (T, C, H, W): the generated UFC-10 clips


def takes(shape: Tuple[int, ...]):
    """Record the per-sample input shape a model constructor's model expects (default IMAGE_INPUT)."""

    def mark(fn):
        fn.input_shape = tuple(shape)
        return fn

    return mark


def input_shape(name: str) -> Tuple[int, ...]:
    """Imports the model's module (and so torch)."""
    return getattr(MODELS.get(name), "input_shape", IMAGE_INPUT)


def describes_inputs(text: str, example_batch, loss):
    """For a model that is not a plain classifier: how its input reads (`python -m train models`), an example
    `(inputs tuple, targets)` maker `example_batch(n, num_classes)`, and `loss(outputs, targets)`."""

    def mark(fn):
        fn.input_text, fn.example_batch, fn.loss = text, example_batch, loss
        return fn

    return mark


def input_text(name: str) -> str:
    own = getattr(MODELS.get(name), "input_text", None)
    return own or f"(B, {', '.join(map(str, input_shape(name)))})"
