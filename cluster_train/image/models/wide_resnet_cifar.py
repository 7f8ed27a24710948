"""Improved Wide ResNet for CIFAR (Zagoruyko & Komodakis 2016, WRN-d-k), with the usual improvements:
pre-activation blocks, dropout between the convolutions, and a final BN-ReLU before pooling."""
import torch.nn as nn
import torch.nn.functional as F

from cluster_train.image.models.pooled import PooledClassifier


class WideBlock(nn.Module):
    def __init__(self, in_ch, out_ch, stride, dropout):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(in_ch), nn.BatchNorm2d(out_ch)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.shortcut = None if stride == 1 and in_ch == out_ch else nn.Conv2d(in_ch, out_ch, 1, stride, bias=False)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        out = self.conv2(self.dropout(F.relu(self.bn2(self.conv1(pre)))))
        return out + (x if self.shortcut is None else self.shortcut(pre))


class WideResNetCifar(PooledClassifier):
    def __init__(self, num_classes=100, depth=10, widen=2, base=8, dropout=0.1):
        super().__init__()
        if (depth - 4) % 6 != 0:
            raise ValueError(f"Wide ResNet depth {depth} must be 6n+4 (10, 16, 28, ...)")
        n = (depth - 4) // 6
        widths = [base * widen, 2 * base * widen, 4 * base * widen]
        layers, ch = [nn.Conv2d(3, base, 3, 1, 1, bias=False)], base
        for stage, width in enumerate(widths):
            for i in range(n):
                layers.append(WideBlock(ch, width, 2 if stage > 0 and i == 0 else 1, dropout))
                ch = width
        layers += [nn.BatchNorm2d(ch), nn.ReLU()]
        self.set_features(nn.Sequential(*layers), ch, num_classes)


def improved_wide_resnet(num_classes: int = 100, depth: int = 10, widen: int = 2, base: int = 8,
                         dropout: float = 0.1) -> WideResNetCifar:
    return WideResNetCifar(num_classes=num_classes, depth=depth, widen=widen, base=base, dropout=dropout)
