"""Seed 000 end to end: the video_suite task writes the seed's files; temporal models learn what per-frame cannot."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("PIL")

from cluster_train.shared import config as cfg  # noqa: E402
from cluster_train.shared.config import DataConfig  # noqa: E402
from cluster_train.image.data.ufc10 import VideoDataModule, generate_ufc10  # noqa: E402
from cluster_train.shared.models import MODELS  # noqa: E402
from cluster_train.image.tasks.video_suite import SIX_MODELS  # noqa: E402

# Documented floor for a temporal model on the generated set (chance is 10 %); measured about 0.9.
TEMPORAL_FLOOR = 0.6


def _accuracy_after_training(name, data, epochs, seed=0):
    torch.manual_seed(seed)
    model = MODELS.build(name, num_classes=10, width=8)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        model.train()
        for x, y in data.train_dataloader():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pairs = [(model(x).argmax(1) == y).float() for x, y in data.val_dataloader()]
    return torch.cat(pairs).mean().item()


@pytest.mark.slow  # trains to an accuracy floor: in make test, not in make test-fast
def test_temporal_model_learns_motion_a_per_frame_model_cannot(tmp_path):
    root = generate_ufc10(tmp_path, train_per_class=12, val_per_class=6, test_per_class=1, size=16)
    data = VideoDataModule(DataConfig(root=str(root), batch_size=16, num_workers=0, augment=False))
    data.setup()
    temporal = _accuracy_after_training("EarlyFusion2D", data, epochs=8)
    per_frame = _accuracy_after_training("PerFrameAggregation2D", data, epochs=4)
    print(f"EarlyFusion2D val acc {temporal:.2f}, PerFrameAggregation2D val acc {per_frame:.2f}")
    assert temporal >= TEMPORAL_FLOOR
    assert temporal > per_frame + 0.3


@pytest.mark.slow  # trains each of the six models: in make test, not in make test-fast
def test_video_suite_writes_the_seeds_files(tmp_path, capsys):
    root = generate_ufc10(tmp_path / "data", train_per_class=2, val_per_class=1, test_per_class=1, frames=8, size=16)
    run = cfg.resolve({
        "task": "video_suite",
        "output_dir": str(tmp_path / "run"),
        "task_params": {"model_params": {"width": 4, "hidden": 8}},
        "data": {"name": "ufc10", "root": str(root), "batch_size": 8, "num_workers": 0},
        "optim": {"name": "adamw", "lr": 1e-3},
        "trainer": {"max_epochs": 2, "strategy": "single", "accelerator": "cpu"},
    })
    from cluster_train.image.fit import fit

    record = fit(run)
    out = tmp_path / "run"
    for name in SIX_MODELS:
        assert (out / "models" / f"{name}_best_weights.pth").is_file()
        assert (out / "models" / f"{name}_final_weights.pth").is_file()
        assert (out / "checkpoints" / f"{name}_epoch_1.pth").is_file()
        assert (out / "checkpoints" / f"{name}_epoch_2.pth").is_file()
        history = json.loads((out / "checkpoints" / f"{name}_training_history.json").read_text())
        assert len(history["val_acc"]) == 2 and "test_acc" in history
        # the best weights load back into a freshly built model
        MODELS.build(name, num_classes=10, width=4, hidden=8).load_state_dict(
            torch.load(out / "models" / f"{name}_best_weights.pth"))
    printed = capsys.readouterr().out
    assert "FINAL RESULTS SUMMARY" in printed
    assert f"Best performing model: {record['best_model']}" in printed
    assert set(record["test_acc"]) == set(SIX_MODELS)


def test_unknown_task_names_the_choices(tmp_path):
    from cluster_train.shared.errors import UserError
    from cluster_train.image.fit import fit

    with pytest.raises(UserError, match="unknown task 'video_suit'.*did you mean 'video_suite'"):
        fit(cfg.resolve({"task": "video_suit", "output_dir": str(tmp_path)}))


def test_experiment_file_resolves():
    run = cfg.load("experiments/ufc10_six_models.yaml")
    assert run.task == "video_suite" and run.data.name == "ufc10"
