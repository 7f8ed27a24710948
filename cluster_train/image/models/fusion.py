"""Seed 001's fusion of CIFAR experts: several trained classifiers' features combined by one fusion head.

Experts are any registered CIFAR model exposing `forward_features(x) -> (B, num_features)` and `head`.
`FusionNet(x)` returns (fused_logits, [each expert's own logits]) so training can use the dual-path loss.
Heads (cluster_train.image.models.FUSION_HEADS, by the seed's names):
  multiplicative          project each expert to `dim`, element-wise product, LayerNorm, linear
  multiplicativeAddition  project, sum + product, MLP with a GELU
  TransformerBase         one token per expert, multi-head self-attention, mean over tokens, linear
  concatenation           concatenate every expert's features, MLP
"""
from typing import List

import torch
import torch.nn as nn

from cluster_train.shared.models import FUSION_HEADS  # noqa: F401  (the table of the heads below, torch-free)


class _Projected(nn.Module):
    def __init__(self, feature_dims: List[int], dim: int):
        super().__init__()
        self.projections = nn.ModuleList(nn.Linear(d, dim) for d in feature_dims)

    def project(self, features):
        return [p(f) for p, f in zip(self.projections, features)]


class Multiplicative(_Projected):
    def __init__(self, feature_dims, num_classes, dim=64):
        super().__init__(feature_dims, dim)
        self.norm = nn.LayerNorm(dim)  # a product of several terms drifts in scale; the norm keeps it trainable
        self.out = nn.Linear(dim, num_classes)

    def forward(self, features):
        return self.out(self.norm(torch.stack(self.project(features)).prod(0)))


class MultiplicativeAddition(_Projected):
    def __init__(self, feature_dims, num_classes, dim=64):
        super().__init__(feature_dims, dim)
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, num_classes))

    def forward(self, features):
        stacked = torch.stack(self.project(features))
        return self.mlp(stacked.sum(0) + stacked.prod(0))


class TransformerBase(_Projected):
    def __init__(self, feature_dims, num_classes, dim=64, heads=4):
        super().__init__(feature_dims, dim)
        self.expert_embedding = nn.Parameter(torch.zeros(len(feature_dims), dim))  # which expert a token came from
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, num_classes)

    def forward(self, features):
        tokens = torch.stack(self.project(features), 1) + self.expert_embedding  # (B, experts, dim)
        attended, _ = self.attention(tokens, tokens, tokens)
        return self.out(self.norm(tokens + attended).mean(1))


class Concatenation(nn.Module):
    def __init__(self, feature_dims, num_classes, dim=64):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(sum(feature_dims), dim), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(dim, num_classes))

    def forward(self, features):
        return self.mlp(torch.cat(features, 1))


class FusionNet(nn.Module):
    def __init__(self, experts: List[nn.Module], fusion: str, num_classes: int, **head_params):
        super().__init__()
        self.experts = nn.ModuleList(experts)
        self.feature_dims = [e.num_features for e in experts]
        self.fusion = FUSION_HEADS.build(fusion, feature_dims=self.feature_dims, num_classes=num_classes, **head_params)

    @property
    def fusion_input_dim(self) -> int:
        return sum(self.feature_dims)

    def forward(self, x):
        features = [e.forward_features(x) for e in self.experts]
        return self.fusion(features), [e.head(f) for e, f in zip(self.experts, features)]
