"""Seed 003's planner in the shape of Hydra-MDP (NAVSIM): scene tokens and ego status in, one score per candidate
of a fixed trajectory vocabulary out, from an imitation head and one head per PDM sub-metric.

  scene (B, N, scene_dim) -> linear -> transformer encoder ----------------+
  ego (B, ego_dim) -> MLP -> one more token -------------------------------+-> memory
  vocabulary (V candidates, learned embeddings) -> queries -> cross-attention over memory (layers) -> heads
  heads: imitation (softmax over candidates, cross-entropy against the expert's nearest candidate) and
         collision, drivable_area, progress (each a per-candidate logit, BCE against per-candidate targets)

The queries attend to the scene, not to each other: self-attention over 8192 candidates would cost 8192^2 per
sample and per layer. num_classes is the vocabulary size (8192 at the real size, Hydra-MDP v8192: 83 M parameters
with the defaults below).
"""
import torch
import torch.nn.functional as F
from torch import nn

from cluster_train.shared.models import describes_inputs

HEADS = ("imitation", "collision", "drivable_area", "progress")
METRIC_HEADS = HEADS[1:]


class CrossAttentionBlock(nn.Module):
    """Pre-norm: the queries attend to the memory, then a feed-forward layer."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm_q, self.norm_ff = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attend = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, queries, memory):
        queries = queries + self.attend(self.norm_q(queries), memory, memory, need_weights=False)[0]
        return queries + self.ff(self.norm_ff(queries))


class HydraPlanner(nn.Module):
    def __init__(self, num_classes: int, scene_dim: int, ego_dim: int, dim: int, heads: int, encoder_layers: int,
                 decoder_layers: int):
        super().__init__()
        self.scene_in = nn.Linear(scene_dim, dim)
        self.ego_in = nn.Sequential(nn.Linear(ego_dim, dim), nn.GELU(), nn.Linear(dim, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, encoder_layers, enable_nested_tensor=False)
        self.vocabulary = nn.Embedding(num_classes, dim)
        self.decoder = nn.ModuleList(CrossAttentionBlock(dim, heads) for _ in range(decoder_layers))
        self.norm = nn.LayerNorm(dim)
        self.heads = nn.ModuleDict({name: nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, 1))
                                    for name in HEADS})

    def forward(self, scene: torch.Tensor, ego: torch.Tensor) -> dict:
        """{head: (B, V) logits} for the four heads."""
        tokens = torch.cat([self.scene_in(scene), self.ego_in(ego).unsqueeze(1)], 1)
        memory = self.encoder(tokens)
        queries = self.vocabulary.weight.unsqueeze(0).expand(len(scene), -1, -1)
        for block in self.decoder:
            queries = block(queries, memory)
        queries = self.norm(queries)
        return {name: head(queries).squeeze(-1) for name, head in self.heads.items()}


def planner_loss(scores: dict, targets: dict) -> torch.Tensor:
    """Imitation cross-entropy plus each metric head's BCE, equally weighted (Hydra-MDP's multi-target distillation)."""
    loss = F.cross_entropy(scores["imitation"], targets["imitation"])
    for name in METRIC_HEADS:
        loss = loss + F.binary_cross_entropy_with_logits(scores[name], targets[name])
    return loss


def example_batch(n: int, num_classes: int, scene_dim: int = 32, ego_dim: int = 8, scene_tokens: int = 6):
    """Inputs and targets shaped like planner_scenes' (for tests and `python -m train models`)."""
    targets = {"imitation": torch.arange(n) % num_classes,
               **{name: (torch.arange(n * num_classes).view(n, num_classes) % 3 == 0).float() for name in METRIC_HEADS}}
    return (torch.randn(n, scene_tokens, scene_dim), torch.randn(n, ego_dim)), targets


@describes_inputs("scene (B, N, 32) + ego (B, 8)", example_batch, planner_loss)
def hydra_mdp(num_classes: int = 8192, scene_dim: int = 32, ego_dim: int = 8, dim: int = 768, heads: int = 12,
              encoder_layers: int = 6, decoder_layers: int = 4) -> HydraPlanner:
    """Defaults: the real size (83 M parameters at 8192 candidates); tests pass dim 16, one layer each."""
    return HydraPlanner(num_classes, scene_dim, ego_dim, dim, heads, encoder_layers, decoder_layers)
