"""Seed 003's planner (hydra_mdp, planner_scenes, trajectory_planning) and seed 004's motion-token model (smart,
motion_tokens, motion_tokens): shapes at tiny size, the generated formats round trip, and each task learns its
generated set on CPU in a few seconds, clearly above chance.

Floors sit below what was measured (in brackets) so a loaded machine's different float order cannot flake:
  trajectory_planning (dim 32, 16 candidates, 6 epochs): imitation acc >= majority + 0.1  [measured ~0.35 vs 0.2]
  motion_tokens (dim 32, 25 tokens, 6 epochs): next-token acc >= 0.3, chance 0.04          [measured ~0.6]
"""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cluster_train.shared import config as cfg  # noqa: E402
from cluster_train.shared.config import DataConfig  # noqa: E402
from cluster_train.image.data.motion_tokens_format import displacement, generate_motion_tokens, tokenize  # noqa: E402
from cluster_train.image.data.planner_scenes_format import generate_planner_scenes  # noqa: E402
from cluster_train.shared.models import MODELS  # noqa: E402

TINY_PLANNER = {"dim": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1}
TINY_SMART = {"dim": 32, "heads": 2, "layers": 1}
PLANNER_SET = dict(train_samples=256, val_samples=64, vocab_size=16, scene_tokens=6, scene_dim=8)
MOTION_SET = dict(train_scenes=128, val_scenes=32, agents=4, steps=10, bins=5)


@pytest.fixture(scope="module")
def planner_root(tmp_path_factory):
    return generate_planner_scenes(tmp_path_factory.mktemp("planner"), **PLANNER_SET)


@pytest.fixture(scope="module")
def motion_root(tmp_path_factory):
    return generate_motion_tokens(tmp_path_factory.mktemp("motion"), **MOTION_SET)


def test_planner_scores_every_candidate_with_every_head():
    model = MODELS.build("hydra_mdp", num_classes=12, scene_dim=8, ego_dim=5, **TINY_PLANNER)
    scores = model(torch.randn(3, 7, 8), torch.randn(3, 5))
    assert {name: tuple(s.shape) for name, s in scores.items()} == {
        "imitation": (3, 12), "collision": (3, 12), "drivable_area": (3, 12), "progress": (3, 12)}


def test_motion_model_predicts_a_token_per_agent_and_step_without_seeing_the_future():
    model = MODELS.build("smart", num_classes=9, **TINY_SMART).eval()
    tokens = torch.randint(0, 9, (2, 3, 5))
    logits = model(tokens)
    assert logits.shape == (2, 3, 5, 9)
    changed = tokens.clone()
    changed[:, :, 3:] = (changed[:, :, 3:] + 1) % 9  # every agent's last two steps
    assert torch.allclose(model(changed)[:, :, :3], logits[:, :, :3], atol=1e-5)
    assert not torch.allclose(model(changed)[:, :, 3:], logits[:, :, 3:])


def test_planner_scenes_round_trip(planner_root):
    from cluster_train.image.data.planner_scenes import PlannerScenesDataModule

    meta = json.loads((planner_root / "meta.json").read_text())
    assert meta["format"] == "planner_scenes/v1" and meta["vocab_size"] == 16
    assert np.load(planner_root / "vocabulary.npy").shape == (16, 8, 2)
    data = PlannerScenesDataModule(DataConfig(root=str(planner_root), batch_size=10, num_workers=0))
    data.setup()
    batch = next(iter(data.train_dataloader()))
    assert batch["scene"].shape == (10, 6, 8) and batch["ego"].shape == (10, 8)
    assert batch["imitation"].dtype == torch.int64 and batch["imitation"].max() < 16
    for name in ("collision", "drivable_area", "progress"):
        assert batch[name].shape == (10, 16) and 0 <= batch[name].min() and batch[name].max() <= 1
    assert len(data.val_set) == 64


def test_motion_tokens_round_trip(motion_root):
    from cluster_train.image.data.motion_tokens import MotionTokensDataModule

    data = MotionTokensDataModule(DataConfig(root=str(motion_root), batch_size=8, num_workers=0))
    data.setup()
    tokens = next(iter(data.train_dataloader()))
    assert (data.vocab_size, tuple(tokens.shape), tokens.dtype) == (25, (8, 4, 10), torch.int64)
    shard = np.load(motion_root / "train" / "shard_000.npz")
    assert np.array_equal(tokenize(shard["positions"], 5, 8.0), shard["tokens"])


def test_a_token_decodes_to_its_displacement_within_a_bin():
    steps = np.array([[[0.0, 0.0], [1.0, -2.0], [4.0, 1.5]]])
    decoded = displacement(tokenize(steps, bins=45, max_step=8.0), bins=45, max_step=8.0)
    assert np.abs(decoded - np.diff(steps, axis=-2)).max() <= 8.0 / 45


def test_make_data_writes_both_sets_and_a_wrong_root_is_one_line(tmp_path):
    from cluster_train.image.cli import make_data
    from cluster_train.image.data.planner_scenes import PlannerScenesDataModule
    from cluster_train.shared.errors import UserError

    make_data("planner_scenes", str(tmp_path / "p"), train_samples=4, val_samples=2, vocab_size=4)
    make_data("motion_tokens", str(tmp_path / "m"), train_scenes=4, val_scenes=2, agents=2, steps=3, bins=3)
    assert (tmp_path / "p" / "train" / "shard_000.npz").is_file() and (tmp_path / "m" / "meta.json").is_file()
    with pytest.raises(UserError, match="holds format 'motion_tokens/v1'"):
        PlannerScenesDataModule(DataConfig(root=str(tmp_path / "m")))


def fit_tiny(tmp_path, task, model, params, data, root):
    from cluster_train.image.fit import fit

    return fit(cfg.resolve({
        "task": task, "output_dir": str(tmp_path / "run"), "model": {"name": model, "params": params},
        "data": {"name": data, "root": str(root), "batch_size": 32, "num_workers": 0},
        "optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.0, "scheduler": "none"},
        "trainer": {"max_epochs": 6, "strategy": "single", "accelerator": "cpu"},
    }))


@pytest.mark.slow  # trains to an accuracy floor: in make test, not in make test-fast
def test_trajectory_planning_learns_the_expert_candidate(tmp_path, planner_root):
    record = fit_tiny(tmp_path, "trajectory_planning", "hydra_mdp", TINY_PLANNER, "planner_scenes", planner_root)
    val = np.load(planner_root / "val" / "shard_000.npz")["imitation"]
    majority = np.bincount(val).max() / len(val)
    print(f"imitation acc {record['imitation_acc']:.3f} (majority {majority:.3f}, chance {record['chance_acc']})")
    assert record["imitation_acc"] >= majority + 0.1
    assert record["final_val_loss"] < 0.7 * record["initial_val_loss"]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["task"] == "trajectory_planning"
    assert {"precision", "input", "gpu", "collision_acc"} <= set(record)


@pytest.mark.slow  # trains to an accuracy floor: in make test, not in make test-fast
def test_motion_tokens_learns_the_next_token(tmp_path, motion_root):
    record = fit_tiny(tmp_path, "motion_tokens", "smart", TINY_SMART, "motion_tokens", motion_root)
    print(f"next-token acc {record['next_token_acc']:.3f} (chance {record['chance_acc']}, "
          f"repeat-last {record['repeat_last_acc']:.3f})")
    assert record["next_token_acc"] >= 0.3 and record["chance_acc"] == 1 / 25
    assert record["final_val_loss"] < 0.7 * record["initial_val_loss"]
    assert {"precision", "input", "gpu"} <= set(record)


def test_the_tasks_refuse_other_data_sets(tmp_path):
    from cluster_train.shared.errors import UserError
    from cluster_train.image.fit import fit

    run = cfg.resolve({"task": "motion_tokens", "output_dir": str(tmp_path), "model": {"name": "smart"}})
    with pytest.raises(UserError, match="reads data.name: motion_tokens"):
        fit(run)
