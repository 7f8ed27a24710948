"""Seed 001 end to end at small scale: experts (with the saved fusion split), then every fusion head over them."""
import csv
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cluster_train.shared import config as cfg  # noqa: E402
from cluster_train.image.fit import fit  # noqa: E402
from cluster_train.image import trackers  # noqa: E402
from cluster_train.image.models.fusion import FUSION_HEADS, FusionNet  # noqa: E402
from cluster_train.shared.models import MODELS  # noqa: E402

TINY = {"resnet_cifar": {"depth": 8, "width": 4}}
COMMON = {"optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.0},
          "trainer": {"max_epochs": 1, "strategy": "single", "accelerator": "cpu", "limit_train_batches": 2,
                      "limit_val_batches": 1}}


@pytest.fixture(scope="module")
def experts_run(tmp_path_factory, demo_data):
    out = tmp_path_factory.mktemp("experts")
    run = cfg.resolve(dict(COMMON, task="cifar_experts", output_dir=str(out), task_params={"num_experts": 4},
                           model={"name": "resnet_cifar", "params": TINY["resnet_cifar"]},
                           data={"root": str(demo_data), "batch_size": 32, "num_workers": 0}))
    record = fit(run)
    return out, record


def test_experts_write_their_checkpoints_and_the_fusion_split(experts_run):
    out, record = experts_run
    held = np.load(out / "splits" / "fusion_holdout_indices.npy")
    assert record["holdout_size"] == len(held) == 200  # 20 % of the 1000 generated training images
    for i in range(4):
        assert (out / "checkpoints" / "resnet_cifar" / f"expert_{i}_best.pth").is_file()
    # the experts folder carries its split too, so it can be copied or linked elsewhere and still fused
    assert np.array_equal(np.load(out / "checkpoints" / "resnet_cifar" / "fusion_holdout_indices.npy"), held)


@pytest.mark.parametrize("fusion", FUSION_HEADS.names())
def test_fusion_trains_every_head_and_saves_components(experts_run, demo_data, tmp_path, fusion):
    experts_out, _ = experts_run
    run = cfg.resolve(dict(COMMON, task="cifar_fusion", output_dir=str(tmp_path),
                           task_params={"experts_dir": str(experts_out / "checkpoints" / "resnet_cifar"),
                                        "fusion": fusion, "fusion_dim": 16},
                           data={"root": str(demo_data), "batch_size": 32, "num_workers": 0}))
    record = fit(run)
    folder = tmp_path / "resnet_cifar_fusions" / fusion
    for part in ("experts/expert_0.pth", "experts/expert_3.pth", "fusion/fusion_head.pth", "global/fusion_model.pth",
                 "global/config.json"):
        assert (folder / part).is_file(), part
    with open(tmp_path / "csv_logs" / "resnet_cifar_fusions" / f"resnet_cifar_{fusion}_training_log.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and {"loss", "accuracy", "experts_lr", "fusion_lr"} <= set(rows[0])
    # experts_lr is optim.lr / 10; fusion_lr is optim.lr scaled by sqrt(256 / (4 experts x 16 features))
    assert record["experts_lr"] == pytest.approx(3e-4) and record["fusion_lr"] == pytest.approx(3e-3 * 2)

    from cluster_train.image.tasks.cifar_fusion import load_fusion_model

    rebuilt = load_fusion_model(folder).eval()
    whole = torch.load(folder / "global" / "fusion_model.pth")
    x = torch.randn(2, 3, 32, 32)
    reference = load_fusion_model(folder)
    reference.load_state_dict(whole)
    assert torch.equal(rebuilt(x)[0], reference.eval()(x)[0])


@pytest.mark.parametrize("fusion", FUSION_HEADS.names())
def test_fusion_net_shapes_and_experts_are_not_frozen(fusion):
    experts = [MODELS.build("resnet_cifar", num_classes=10, **TINY["resnet_cifar"]) for _ in range(4)]
    net = FusionNet(experts, fusion, num_classes=10, dim=16)
    fused, own = net(torch.randn(3, 3, 32, 32))
    assert fused.shape == (3, 10) and len(own) == 4 and own[0].shape == (3, 10)
    (fused.sum() + sum(o.sum() for o in own)).backward()
    assert all(p.grad is not None for p in net.parameters())


def test_fusion_without_experts_dir_is_a_one_line_error(tmp_path):
    from cluster_train.shared.errors import UserError

    with pytest.raises(UserError, match="task_params.experts_dir is not set"):
        fit(cfg.resolve({"task": "cifar_fusion", "output_dir": str(tmp_path)}))
    with pytest.raises(UserError, match=r"expert checkpoint .*expert_0_best.pth is missing"):
        np.save(tmp_path / "h.npy", np.arange(3))
        fit(cfg.resolve({"task": "cifar_fusion", "output_dir": str(tmp_path),
                         "task_params": {"experts_dir": str(tmp_path), "holdout_path": str(tmp_path / "h.npy")}}))


@pytest.mark.parametrize("mode", ["offline", None])
def test_fusion_logs_to_weights_and_biases_only_when_configured(experts_run, demo_data, tmp_path, monkeypatch, mode):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    experts_out, _ = experts_run
    tracker = {"use": ["wandb"], "offline": True} if mode else {}  # offline: W&B writes its run files locally
    fit(cfg.resolve(dict(COMMON, task="cifar_fusion", output_dir=str(tmp_path), tracker=tracker,
                         task_params={"experts_dir": str(experts_out / "checkpoints" / "resnet_cifar"),
                                      "fusion": "concatenation", "fusion_dim": 16},
                         data={"root": str(demo_data), "batch_size": 32, "num_workers": 0})))
    runs = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == (1 if mode else 0), sorted(p.name for p in tmp_path.iterdir())
    if mode:  # the model's tracked run, kept for the next segment (cluster_train/image/trackers.py)
        (key,) = json.loads((tmp_path / "trackers.json").read_text())
        assert key == "wandb/resnet_cifar_concatenation"
        assert runs[0].name == f"run-{trackers.wandb_id(tmp_path, 'resnet_cifar_concatenation')}.wandb"
