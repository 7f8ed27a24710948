"""CIFAR DenseNet-BC (Huang et al. 2017): bottleneck dense layers, transitions halve channels and resolution."""
import torch
import torch.nn as nn

from cluster_train.image.models.pooled import PooledClassifier


class DenseLayer(nn.Module):
    def __init__(self, in_ch: int, growth: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.BatchNorm2d(in_ch), nn.ReLU(), nn.Conv2d(in_ch, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x):
        return torch.cat([x, self.net(x)], 1)


class DenseNetCifar(PooledClassifier):
    def __init__(self, num_classes=100, depth=22, growth=8, reduction=0.5):
        super().__init__()
        if (depth - 4) % 6 != 0:
            raise ValueError(f"DenseNet-BC depth {depth} must be 6n+4 (22, 40, 100, ...)")
        per_block = (depth - 4) // 6
        ch = 2 * growth
        layers = [nn.Conv2d(3, ch, 3, padding=1, bias=False)]
        for block in range(3):
            for _ in range(per_block):
                layers.append(DenseLayer(ch, growth))
                ch += growth
            if block < 2:
                out = int(ch * reduction)
                layers += [nn.BatchNorm2d(ch), nn.ReLU(), nn.Conv2d(ch, out, 1, bias=False), nn.AvgPool2d(2)]
                ch = out
        layers += [nn.BatchNorm2d(ch), nn.ReLU()]
        self.set_features(nn.Sequential(*layers), ch, num_classes)


def densenet_cifar(num_classes: int = 100, depth: int = 22, growth: int = 8) -> DenseNetCifar:
    return DenseNetCifar(num_classes=num_classes, depth=depth, growth=growth)
