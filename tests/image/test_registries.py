"""Model, task and data registries as users reach them: `python -m train models`, experiment files, make_data."""
import pytest

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from cluster_train.shared import config as cfg  # noqa: E402


def test_models_command_lists_every_model_with_parameters_and_input(capsys):
    from cluster_train.image.cli import models
    from cluster_train.shared.models import MODELS

    models()
    printed = capsys.readouterr().out
    for name in MODELS.names():
        assert name in printed
    assert "parameters  input (B, 8, 3, 32, 32)" in printed and "input (B, 3, 32, 32)" in printed


@pytest.mark.parametrize("name, task", [("ufc10_six_models", "video_suite"), ("cifar100_experts", "cifar_experts"),
                                        ("cifar100_fusion", "cifar_fusion"), ("action_recognition", "classify")])
def test_experiment_files_name_registered_tasks_models_and_data(name, task):
    from cluster_train.shared.data import DATASETS
    from cluster_train.shared.models import MODELS
    from cluster_train.shared.tasks import TASKS

    run = cfg.load(ROOT / "experiments" / f"{name}.yaml", ["model.name=basic_cnn"] if task == "classify" else [])
    assert run.task == task and run.task in TASKS and run.data.name in DATASETS and run.model.name in MODELS


def test_make_data_writes_the_video_layout(tmp_path):
    from cluster_train.image.cli import make_data

    make_data("ufc10", str(tmp_path), train_per_class=1, val_per_class=1, test_per_class=1, size=16)
    assert sorted(p.name for p in (tmp_path / "metadata").iterdir()) == ["test.csv", "train.csv", "val.csv"]
