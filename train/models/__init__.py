"""Model registry: `MODELS.build(name, num_classes=..., **params)`; importing a family registers it."""
from train.registry import Registry

MODELS = Registry("model")

from train.models import resnet_cifar  # noqa: E402,F401  (registers its models)
