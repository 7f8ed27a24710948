"""Each family learns its generated data on CPU in seconds, to a documented accuracy well above chance.

Floors are set below what was measured (in brackets) so a loaded CI machine's different float order cannot flake:
  CIFAR (resnet_cifar depth 8 width 4, 8 images/class, 4 epochs): floor 0.08, chance 0.01  [measured 0.21]
  action recognition (cnn_lstm width 4, 10 clips/class, 6 epochs):  floor 0.35, chance 0.10  [measured 0.67]
  video fusion (EarlyFusion2D vs PerFrameAggregation2D): tests/image/test_video_tasks.py    [measured 0.92 vs 0.12]
"""
import pytest

torch = pytest.importorskip("torch")

from cluster_train.shared.config import DataConfig  # noqa: E402
from cluster_train.shared.models import MODELS  # noqa: E402


def accuracy_after_training(name, data, epochs, lr, **params):
    torch.manual_seed(0)
    model = MODELS.build(name, num_classes=data.num_classes, **params)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(epochs):
        model.train()
        for x, y in data.train_dataloader():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        return torch.cat([(model(x).argmax(1) == y).float() for x, y in data.val_dataloader()]).mean().item()


@pytest.mark.slow  # trains to an accuracy floor: in make test, not in make test-fast
def test_cifar_model_learns_the_generated_cifar100_set(tmp_path):
    from cluster_train.image.data.cifar100 import Cifar100DataModule, generate_cifar100

    generate_cifar100(tmp_path, train_per_class=8, test_per_class=2)
    data = Cifar100DataModule(DataConfig(root=str(tmp_path), batch_size=50, num_workers=0, augment=False))
    data.setup()
    acc = accuracy_after_training("resnet_cifar", data, epochs=4, lr=1e-2, depth=8, width=4)
    print(f"resnet_cifar val acc {acc:.3f} (chance 0.01)")
    assert acc >= 0.08


@pytest.mark.slow  # trains to an accuracy floor: in make test, not in make test-fast
def test_action_recognition_model_learns_the_generated_video_set(tmp_path):
    pytest.importorskip("PIL")
    from cluster_train.image.data.ufc10 import VideoDataModule, generate_ufc10

    generate_ufc10(tmp_path, train_per_class=10, val_per_class=6, test_per_class=1, size=16)
    data = VideoDataModule(DataConfig(root=str(tmp_path), batch_size=16, num_workers=0, augment=False))
    data.setup()
    acc = accuracy_after_training("cnn_lstm", data, epochs=6, lr=5e-3, width=4, hidden=32)
    print(f"cnn_lstm val acc {acc:.3f} (chance 0.10)")
    assert acc >= 0.35
