"""The tail the CIFAR fusion backbones share: global-average-pooled features, then one linear head."""
import torch.nn as nn
import torch.nn.functional as F


class PooledClassifier(nn.Module):
    """Subclasses build their layers and call `set_features`; the fusion heads combine `forward_features`."""

    def set_features(self, features: nn.Module, channels: int, num_classes: int) -> None:
        self.features = features
        self.num_features = channels
        self.head = nn.Linear(channels, num_classes)

    def forward_features(self, x):
        """(B, num_features) pooled features."""
        return F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)

    def forward(self, x):
        return self.head(self.forward_features(x))
