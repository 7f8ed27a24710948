"""Seed 000's six video classifiers: where in the network the frames of a clip meet.

All take clips shaped (B, T, C, H, W) and return (B, num_classes) logits.

- PerFrameAggregation2D: a 2D CNN classifies every frame alone; the clip's logits are the mean over frames.
  It sees no motion at all: the baseline a temporal model must beat.
- LateFusion2D: a 2D CNN encodes every frame (keeping a coarse spatial map); an MLP reads the encodings of all
  frames in order, so motion is seen only after the convolutions.
- EarlyFusion2D: the frames are stacked as channels (T*C) at the input of one 2D CNN.
- PerFrameAggregation3D / LateFusion3D: the same two ideas over short windows of `window` frames encoded by a 3D
  CNN (per-window logits averaged, or window encodings concatenated in order).
- EarlyFusion3D: one 3D CNN over the whole clip, pooling time and space together.
"""
import torch
import torch.nn as nn

from cluster_train.shared.models import VIDEO_INPUT, takes

POOLED = 4  # encoders keep a POOLED x POOLED map: fusion after pooling everything away could not see where things moved


def _conv2d(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def _conv3d(cin, cout):
    return nn.Sequential(nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm3d(cout), nn.ReLU(inplace=True))


class FrameEncoder2D(nn.Module):
    """(N, C, H, W) -> (N, 2*width*POOLED*POOLED)."""

    def __init__(self, in_channels: int, width: int):
        super().__init__()
        self.net = nn.Sequential(
            _conv2d(in_channels, width), nn.MaxPool2d(2), _conv2d(width, 2 * width), nn.MaxPool2d(2),
            _conv2d(2 * width, 2 * width), nn.AdaptiveAvgPool2d(POOLED), nn.Flatten(),
        )
        self.out_features = 2 * width * POOLED * POOLED

    def forward(self, x):
        return self.net(x)


class ClipEncoder3D(nn.Module):
    """(N, C, T, H, W) -> (N, 2*width*POOLED*POOLED); time is pooled to one step at the end."""

    def __init__(self, in_channels: int, width: int):
        super().__init__()
        self.net = nn.Sequential(
            _conv3d(in_channels, width), nn.MaxPool3d((1, 2, 2)), _conv3d(width, 2 * width), nn.MaxPool3d((2, 2, 2)),
            _conv3d(2 * width, 2 * width), nn.AdaptiveAvgPool3d((1, POOLED, POOLED)), nn.Flatten(),
        )
        self.out_features = 2 * width * POOLED * POOLED

    def forward(self, x):
        return self.net(x)


def _head(features: int, hidden: int, num_classes: int, dropout: float) -> nn.Module:
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(features, hidden), nn.ReLU(inplace=True),
                         nn.Linear(hidden, num_classes))


class PerFrameAggregation2D(nn.Module):
    def __init__(self, num_classes=10, in_channels=3, width=16, hidden=64, dropout=0.2):
        super().__init__()
        self.encoder = FrameEncoder2D(in_channels, width)
        self.head = _head(self.encoder.out_features, hidden, num_classes, dropout)

    def forward(self, clips):
        b, t = clips.shape[:2]
        logits = self.head(self.encoder(clips.flatten(0, 1)))
        return logits.view(b, t, -1).mean(1)


class LateFusion2D(nn.Module):
    def __init__(self, num_classes=10, num_frames=8, in_channels=3, width=16, hidden=64, dropout=0.2):
        super().__init__()
        self.encoder = FrameEncoder2D(in_channels, width)
        self.head = _head(num_frames * self.encoder.out_features, hidden, num_classes, dropout)

    def forward(self, clips):
        b, t = clips.shape[:2]
        return self.head(self.encoder(clips.flatten(0, 1)).view(b, -1))


class EarlyFusion2D(nn.Module):
    def __init__(self, num_classes=10, num_frames=8, in_channels=3, width=16, hidden=64, dropout=0.2):
        super().__init__()
        self.encoder = FrameEncoder2D(num_frames * in_channels, width)
        self.head = _head(self.encoder.out_features, hidden, num_classes, dropout)

    def forward(self, clips):
        return self.head(self.encoder(clips.flatten(1, 2)))


def _windows(clips: torch.Tensor, window: int) -> torch.Tensor:
    """(B, T, C, H, W) -> (B * T//window, C, window, H, W): consecutive non-overlapping windows."""
    b, t, c, h, w = clips.shape
    n = t // window
    x = clips[:, : n * window].reshape(b, n, window, c, h, w)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(b * n, c, window, h, w)


class PerFrameAggregation3D(nn.Module):
    def __init__(self, num_classes=10, window=2, in_channels=3, width=16, hidden=64, dropout=0.2):
        super().__init__()
        self.window = window
        self.encoder = ClipEncoder3D(in_channels, width)
        self.head = _head(self.encoder.out_features, hidden, num_classes, dropout)

    def forward(self, clips):
        logits = self.head(self.encoder(_windows(clips, self.window)))
        return logits.view(clips.shape[0], -1, logits.shape[-1]).mean(1)


class LateFusion3D(nn.Module):
    def __init__(self, num_classes=10, num_frames=8, window=2, in_channels=3, width=16, hidden=64, dropout=0.2):
        super().__init__()
        self.window = window
        self.encoder = ClipEncoder3D(in_channels, width)
        self.head = _head((num_frames // window) * self.encoder.out_features, hidden, num_classes, dropout)

    def forward(self, clips):
        return self.head(self.encoder(_windows(clips, self.window)).view(clips.shape[0], -1))


class EarlyFusion3D(nn.Module):
    def __init__(self, num_classes=10, in_channels=3, width=16, hidden=64, dropout=0.2):
        super().__init__()
        self.encoder = ClipEncoder3D(in_channels, width)
        self.head = _head(self.encoder.out_features, hidden, num_classes, dropout)

    def forward(self, clips):
        return self.head(self.encoder(clips.transpose(1, 2)))  # Conv3d wants (B, C, T, H, W)


# Registered (cluster_train/shared/models.py) under the seed's class names: its users' files are
# models/<Model>_best_weights.pth.
for _cls in (PerFrameAggregation2D, LateFusion2D, EarlyFusion2D, PerFrameAggregation3D, LateFusion3D, EarlyFusion3D):
    takes(VIDEO_INPUT)(_cls)
