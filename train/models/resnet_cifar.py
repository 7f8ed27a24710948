"""CIFAR-style ResNet (He et al. 2016, section 4.2): 3x3 stem, three stages of basic blocks, 6n+2 layers."""
import torch.nn as nn
import torch.nn.functional as F



class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    def __init__(self, depth: int = 20, width: int = 16, num_classes: int = 100, in_channels: int = 3):
        super().__init__()
        if (depth - 2) % 6 != 0 or depth < 8:
            raise ValueError(f"ResNet depth {depth} must be 6n+2 (8, 14, 20, 32, 56, ...)")
        blocks = (depth - 2) // 6
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, in_ch = [], width
        for stage, out_ch in enumerate((width, 2 * width, 4 * width)):
            for i in range(blocks):
                layers.append(BasicBlock(in_ch, out_ch, stride=2 if stage > 0 and i == 0 else 1))
                in_ch = out_ch
        self.stages = nn.Sequential(*layers)
        self.num_features = in_ch
        self.head = nn.Linear(in_ch, num_classes)

    def forward_features(self, x):
        """(B, num_features) pooled features: what the CIFAR fusion heads combine."""
        return F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1).flatten(1)

    def forward(self, x):
        return self.head(self.forward_features(x))


def resnet_cifar(num_classes: int = 100, depth: int = 20, width: int = 16) -> ResNetCifar:
    return ResNetCifar(depth=depth, width=width, num_classes=num_classes)
