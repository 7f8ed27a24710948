"""CIFAR ResNeXt (Xie et al. 2017): bottleneck blocks whose 3x3 convolution is split into `cardinality` groups."""
import torch.nn as nn
import torch.nn.functional as F

from cluster_train.image.models.pooled import PooledClassifier


class NeXtBlock(nn.Module):
    def __init__(self, in_ch, out_ch, stride, cardinality, group_width):
        super().__init__()
        inner = cardinality * group_width
        self.net = nn.Sequential(
            nn.Conv2d(in_ch, inner, 1, bias=False), nn.BatchNorm2d(inner), nn.ReLU(),
            nn.Conv2d(inner, inner, 3, stride, 1, groups=cardinality, bias=False), nn.BatchNorm2d(inner), nn.ReLU(),
            nn.Conv2d(inner, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch),
        )
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        return F.relu(self.net(x) + self.shortcut(x))


class ResNeXtCifar(PooledClassifier):
    def __init__(self, num_classes=100, blocks_per_stage=1, cardinality=4, group_width=4, base=16, expansion=2):
        super().__init__()
        layers, ch = [nn.Conv2d(3, base, 3, 1, 1, bias=False), nn.BatchNorm2d(base), nn.ReLU()], base
        for stage in range(3):
            for i in range(blocks_per_stage):
                out = base * expansion * 2**stage
                layers.append(NeXtBlock(ch, out, 2 if stage > 0 and i == 0 else 1, cardinality, group_width * 2**stage))
                ch = out
        self.set_features(nn.Sequential(*layers), ch, num_classes)


def resnext_cifar(num_classes: int = 100, blocks_per_stage: int = 1, cardinality: int = 4, group_width: int = 4,
                  base: int = 16, expansion: int = 2) -> ResNeXtCifar:
    # expansion: stage outputs are base * expansion * (1, 2, 4); the paper's ResNeXt-29 uses 4 (256, 512, 1024 with
    # base 64), so ResNeXt-29 8x64d is blocks_per_stage=3, cardinality=8, group_width=64, base=64, expansion=4
    return ResNeXtCifar(num_classes, blocks_per_stage, cardinality, group_width, base, expansion)
