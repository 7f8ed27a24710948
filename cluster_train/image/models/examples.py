"""An example batch and the training loss for any model name: what the generic model tests and benchmarks use."""
from cluster_train.shared.models import MODELS, input_shape


def example_batch(name: str, n: int, num_classes: int):
    """(inputs tuple, targets) for n samples: a classifier's random inputs and labels, or the model's own maker."""
    import torch

    own = getattr(MODELS.get(name), "example_batch", None)
    if own is not None:
        return own(n, num_classes)
    return (torch.randn(n, *input_shape(name)),), torch.arange(n) % num_classes


def training_loss(name: str):
    """loss(outputs, targets): the model's own, or cross-entropy for a classifier."""
    import torch.nn.functional as F

    return getattr(MODELS.get(name), "loss", None) or F.cross_entropy
