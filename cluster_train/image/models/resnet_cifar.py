"""CIFAR-style ResNet (He et al. 2016, section 4.2): 3x3 stem, three stages of basic blocks, 6n+2 layers.

`stages=4` gives the four-stage ResNet that CIFAR code bases call ResNet-18 (depth 18, width 64: stages of two
basic blocks at 64, 128, 256, 512 channels, 11.2 M parameters at 100 classes) on the same 3x3 stem."""
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
    def __init__(self, depth: int = 20, width: int = 16, num_classes: int = 100, in_channels: int = 3, stages: int = 3):
        super().__init__()
        per = 2 * stages  # layers each block-per-stage adds: two convolutions in every stage
        if stages < 1 or (depth - 2) % per != 0 or depth < per + 2:
            examples = ", ".join(str(per * n + 2) for n in (1, 2, 3, 5))
            raise ValueError(f"ResNet depth {depth} with {stages} stages must be {per}n+2 ({examples}, ...)")
        blocks = (depth - 2) // per
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, in_ch = [], width
        for stage, out_ch in enumerate(width * 2**s for s in range(stages)):
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


def resnet_cifar(num_classes: int = 100, depth: int = 20, width: int = 16, stages: int = 3) -> ResNetCifar:
    # stages: 3 is He et al.'s CIFAR ResNet (ResNet-20, -56); 4 with depth 18, width 64 is the ResNet-18 of seed 001
    return ResNetCifar(depth=depth, width=width, num_classes=num_classes, stages=stages)
