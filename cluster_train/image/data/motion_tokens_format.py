"""Seed 004's motion data as a generated stand-in for SMART's tokenised Waymo scenes (numpy only).

On disk (cluster_train/image/data/npz_shards.py): meta.json with format "motion_tokens/v1", bins, max_step (metres),
vocab_size (bins * bins), agents, steps, step_s, and per split (train, val) shards holding, per scene:
  positions  float32 (agents, steps + 1, 2)  each agent's (x, y) every step_s seconds
  tokens     int16   (agents, steps)         each step's displacement as one motion token (`tokenize`)
A motion token is a cell of a bins x bins grid over displacements in [-max_step, max_step]^2 (x bin major).
Agents drive at their own speed and turn rate, with small random accelerations: the next token follows from the
recent ones plus noise, which is what next-token prediction learns.
"""
from pathlib import Path

import numpy as np

from cluster_train.image.data import npz_shards

FORMAT = "motion_tokens/v1"
STEP_S = 0.5  # seconds per token: SMART's 0.5 s motion tokens
MAX_SPEED, MAX_TURN = 14.0, 0.5  # m/s, rad/s


def generate_motion_tokens(root, train_scenes: int = 512, val_scenes: int = 128, agents: int = 32, steps: int = 18,
                           bins: int = 45, max_step: float = 8.0, seed: int = 0) -> Path:
    """Write a learnable motion-token set; bins 45 (2025 tokens) matches experiments/smart_motion.yaml's model."""
    rng = np.random.default_rng(seed)
    splits = {}
    for split, count in (("train", train_scenes), ("val", val_scenes)):
        positions = drive(rng, count, agents, steps)
        splits[split] = {"positions": positions.astype(np.float32),
                         "tokens": tokenize(positions, bins, max_step).astype(np.int16)}
    return npz_shards.write_set(root, FORMAT, splits, bins=bins, max_step=max_step, vocab_size=bins * bins,
                                agents=agents, steps=steps, step_s=STEP_S)


def drive(rng, scenes: int, agents: int, steps: int) -> np.ndarray:
    """(scenes, agents, steps + 1, 2) positions: per agent a speed, a heading and a turn rate, plus jitter."""
    shape = (scenes, agents)
    speed = rng.uniform(0, MAX_SPEED, shape)[..., None] + rng.normal(0, 0.3, (*shape, steps)).cumsum(-1)
    turn = rng.uniform(-MAX_TURN, MAX_TURN, shape)[..., None] + rng.normal(0, 0.02, (*shape, steps))
    heading = rng.uniform(-np.pi, np.pi, shape)[..., None] + (turn * STEP_S).cumsum(-1)
    step = np.clip(speed, 0, None)[..., None] * STEP_S * np.stack([np.cos(heading), np.sin(heading)], -1)
    start = rng.uniform(-50, 50, (*shape, 1, 2))
    return np.concatenate([start, start + step.cumsum(-2)], -2)


def tokenize(positions: np.ndarray, bins: int, max_step: float) -> np.ndarray:
    """Each step's displacement (..., steps) as token x_bin * bins + y_bin on the displacement grid."""
    cells = np.floor((np.diff(positions, axis=-2) + max_step) / (2 * max_step) * bins)
    cells = np.clip(cells, 0, bins - 1).astype(np.int64)
    return cells[..., 0] * bins + cells[..., 1]


def displacement(tokens: np.ndarray, bins: int, max_step: float) -> np.ndarray:
    """A token's cell centre (..., 2) in metres: the inverse of `tokenize`, up to the bin width."""
    width = 2 * max_step / bins
    return np.stack([tokens // bins, tokens % bins], -1) * width - max_step + width / 2
