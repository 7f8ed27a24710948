"""Seed 004's motion model in the shape of SMART: every agent's trajectory as a sequence of motion tokens (cells of a
displacement grid, cluster_train/image/data/motion_tokens_format.py) and a decoder-only transformer that predicts each
agent's next token from every agent's tokens so far (cross-entropy).

The scene's tokens are laid out time-major, (t0, agent 0), (t0, agent 1), ..., (t1, agent 0), ...; a token sees the
tokens of every agent up to its own time step (block-causal), so agents interact without seeing the future. Each
token embeds its motion token, its time step and its agent slot (which history is whose).
num_classes is the token vocabulary (2025 = 45 x 45 displacement bins in experiments/smart_motion.yaml).
"""
import torch
import torch.nn.functional as F
from torch import nn

from cluster_train.shared.models import describes_inputs


class MotionTokenTransformer(nn.Module):
    def __init__(self, num_classes: int, dim: int, heads: int, layers: int, max_agents: int, max_steps: int):
        super().__init__()
        self.token, self.agent, self.time = (nn.Embedding(n, dim) for n in (num_classes, max_agents, max_steps))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.next_token = nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, A, T) -> (B, A, T, V) logits of each agent's token at t + 1."""
        batch, agents, steps = tokens.shape
        x = self.token(tokens) + self.agent.weight[:agents, None] + self.time.weight[None, :steps]
        x = x.transpose(1, 2).reshape(batch, steps * agents, -1)  # time-major
        x = self.blocks(x, mask=block_causal_mask(agents, steps, tokens.device))
        logits = self.next_token(self.norm(x))
        return logits.view(batch, steps, agents, -1).transpose(1, 2)


def block_causal_mask(agents: int, steps: int, device) -> torch.Tensor:
    """True where attention is blocked: a key from a later time step than the query's."""
    time = torch.arange(steps, device=device).repeat_interleave(agents)
    return time[None, :] > time[:, None]


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the prediction at each step against the token one step later (the last has none)."""
    return F.cross_entropy(logits[:, :, :-1].flatten(0, 2), tokens[:, :, 1:].flatten())


def example_batch(n: int, num_classes: int, agents: int = 3, steps: int = 5):
    tokens = torch.arange(n * agents * steps).view(n, agents, steps) % num_classes
    return (tokens,), tokens


@describes_inputs("motion tokens (B, agents, steps)", example_batch, next_token_loss)
def smart(num_classes: int = 2025, dim: int = 256, heads: int = 8, layers: int = 8, max_agents: int = 64,
          max_steps: int = 32) -> MotionTokenTransformer:
    """Defaults: SMART-7M's scale (7.4 M parameters at 2025 tokens); tests pass dim 16, one layer."""
    return MotionTokenTransformer(num_classes, dim, heads, layers, max_agents, max_steps)
