"""Seed 003's planning data as a generated stand-in for NAVSIM's navtrain + metric cache (numpy only).

On disk (cluster_train/image/data/npz_shards.py): meta.json with format "planner_scenes/v1", vocab_size, horizon,
scene_tokens, scene_dim, ego_dim, and per split (train, val) shards holding, per sample:
  scene          float32 (scene_tokens, scene_dim)  token 0 the lane (half width), then obstacles (x, y, radius),
                                                    the rest clutter; each token's remaining features are noise
  ego            float32 (ego_dim,)                 speed, yaw rate (observed with noise), then noise
  imitation      int64  ()                          the vocabulary candidate nearest the expert's trajectory
  collision      uint8  (vocab_size,)               1 where the candidate passes through an obstacle
  drivable_area  uint8  (vocab_size,)               1 where the candidate stays inside the lane
  progress       uint8  (vocab_size,)               forward distance / the best candidate's, times 255
and vocabulary.npy: float32 (vocab_size, horizon, 2), the candidates' (x, y) poses (fixed by the set's seed).
Every target is a function of the true state; the inputs observe it with noise, so a model can learn them.
"""
from pathlib import Path

import numpy as np

from cluster_train.image.data import npz_shards

FORMAT = "planner_scenes/v1"
METRICS = ("collision", "drivable_area", "progress")
DT = 0.5  # seconds between poses: NAVSIM's 4 s horizon at 2 Hz is 8 poses
MAX_SPEED, MAX_CURVATURE = 15.0, 0.08  # m/s, 1/m
LANE_HALF_WIDTH = (1.5, 6.0)  # metres, drawn per scene
OBSTACLES = 3


def generate_planner_scenes(root, train_samples: int = 512, val_samples: int = 128, vocab_size: int = 8192,
                            scene_tokens: int = 32, scene_dim: int = 32, ego_dim: int = 8, horizon: int = 8,
                            seed: int = 0) -> Path:
    """Write a learnable planner set; vocab_size 8192 matches experiments/navsim_planner.yaml's model."""
    rng = np.random.default_rng(seed)
    vocabulary = trajectories(rng.uniform(0, MAX_SPEED, vocab_size),
                              rng.uniform(-MAX_CURVATURE, MAX_CURVATURE, vocab_size), horizon)
    sizes = dict(scene_tokens=scene_tokens, scene_dim=scene_dim, ego_dim=ego_dim)
    splits = {split: scenes(rng, vocabulary, count, **sizes)
              for split, count in (("train", train_samples), ("val", val_samples))}
    root = npz_shards.write_set(root, FORMAT, splits, vocab_size=vocab_size, horizon=horizon, **sizes)
    np.save(root / "vocabulary.npy", vocabulary.astype(np.float32))
    return root


def trajectories(speed: np.ndarray, curvature: np.ndarray, horizon: int) -> np.ndarray:
    """(n, horizon, 2) poses of constant-speed, constant-curvature motion from the origin, heading +x."""
    t = DT * np.arange(1, horizon + 1)
    heading = np.outer(speed * curvature, t)  # (n, horizon)
    step = speed[:, None] * DT
    return np.stack([np.cumsum(step * np.cos(heading), 1), np.cumsum(step * np.sin(heading), 1)], -1)


def scenes(rng, vocabulary: np.ndarray, count: int, scene_tokens: int, scene_dim: int, ego_dim: int) -> dict:
    speed, curvature = rng.uniform(0, MAX_SPEED, count), rng.uniform(-MAX_CURVATURE, MAX_CURVATURE, count)
    expert = trajectories(speed, curvature, vocabulary.shape[1])
    half_width = rng.uniform(*LANE_HALF_WIDTH, count)
    obstacles = np.stack([rng.uniform(5, 60, (count, OBSTACLES)), rng.uniform(-8, 8, (count, OBSTACLES)),
                          rng.uniform(1, 3, (count, OBSTACLES))], -1)  # (count, OBSTACLES, [x, y, radius])
    return {
        "scene": scene_features(rng, half_width, obstacles, scene_tokens, scene_dim),
        "ego": ego_status(rng, speed, curvature, ego_dim),
        "imitation": nearest(vocabulary, expert),
        **metric_targets(vocabulary, half_width, obstacles),
    }


def scene_features(rng, half_width, obstacles, tokens: int, dim: int) -> np.ndarray:
    """Token features scaled to about unit range: [is_lane, is_obstacle, a, b, c, noise...]."""
    count = len(half_width)
    features = rng.normal(0, 0.1, (count, tokens, dim)).astype(np.float32)
    features[:, :, :5] = 0
    features[:, 0, 0], features[:, 0, 2] = 1, half_width / 5
    features[:, 1 : 1 + OBSTACLES, 1] = 1
    features[:, 1 : 1 + OBSTACLES, 2:5] = obstacles / [30.0, 5.0, 2.0]
    return features


def ego_status(rng, speed, curvature, dim: int) -> np.ndarray:
    ego = rng.normal(0, 0.1, (len(speed), dim)).astype(np.float32)
    ego[:, 0] = speed / MAX_SPEED + rng.normal(0, 0.02, len(speed))
    ego[:, 1] = curvature / MAX_CURVATURE + rng.normal(0, 0.02, len(speed))
    return ego


def nearest(vocabulary: np.ndarray, expert: np.ndarray) -> np.ndarray:
    """Index of the candidate with the smallest mean pose distance to each expert trajectory."""
    found = [np.linalg.norm(vocabulary[None] - e[None, None], axis=-1).mean(-1).argmin(-1) for e in expert]
    return np.concatenate(found).astype(np.int64)


def metric_targets(vocabulary: np.ndarray, half_width: np.ndarray, obstacles: np.ndarray) -> dict:
    """Per-candidate PDM-style sub-scores for each scene, stored as uint8 (one scene at a time: 8192 candidates
    by every obstacle would not fit in memory for a whole split)."""
    hit = np.stack([_collides(vocabulary, scene_obstacles) for scene_obstacles in obstacles])
    inside = (np.abs(vocabulary[None, :, :, 1]) <= half_width[:, None, None]).all(-1)
    forward = np.clip(vocabulary[:, -1, 0], 0, None)
    progress = np.broadcast_to(forward / max(forward.max(), 1e-6), hit.shape)
    return {"collision": hit.astype(np.uint8), "drivable_area": inside.astype(np.uint8),
            "progress": np.round(255 * progress).astype(np.uint8)}


def _collides(vocabulary: np.ndarray, obstacles: np.ndarray) -> np.ndarray:
    gaps = vocabulary[:, :, None, :] - obstacles[None, None, :, :2]  # (candidate, pose, obstacle, 2)
    return (np.linalg.norm(gaps, axis=-1) < obstacles[:, 2]).any((-1, -2))
