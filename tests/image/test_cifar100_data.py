import pickle

import numpy as np
import pytest

from cluster_train.image.data import cifar100_format as fmt
from cluster_train.shared.errors import UserError

pytest.importorskip("torch")
from cluster_train.image.data.cifar100 import generate_cifar100, Cifar100DataModule  # noqa: E402
from cluster_train.shared.config import DataConfig  # noqa: E402


def test_generator_writes_the_python_format(tmp_path):
    generate_cifar100(tmp_path, train_per_class=2, test_per_class=1)
    with open(tmp_path / "cifar-100-python" / "train", "rb") as f:
        entry = pickle.load(f, encoding="latin1")  # exactly how torchvision's CIFAR100 reads it
    assert entry["data"].shape == (200, 3072) and entry["data"].dtype == np.uint8
    assert sorted(set(entry["fine_labels"])) == list(range(100))
    assert set(entry) >= {"data", "fine_labels", "coarse_labels", "filenames", "batch_label"}
    assert len(fmt.read_class_names(tmp_path)) == 100


def test_reader_reads_a_hand_made_file(tmp_path):
    images = np.zeros((3, 32, 32, 3), np.uint8)
    images[1, :, :, 0] = 255  # red plane only
    fmt.write_split(tmp_path, "test", images, np.array([0, 5, 99]), np.array([0, 1, 19]))
    read, labels = fmt.read_split(tmp_path, "test")
    assert labels.tolist() == [0, 5, 99]
    assert read[1, 0, 0].tolist() == [255, 0, 0]


def test_missing_file_names_the_file_and_the_generator(tmp_path):
    with pytest.raises(UserError, match=r"cifar-100-python/train is missing.*make_data cifar100"):
        fmt.read_split(tmp_path, "train")


def test_malformed_file_is_refused(tmp_path):
    path = tmp_path / "cifar-100-python" / "train"
    path.parent.mkdir()
    path.write_bytes(b"not a pickle")
    with pytest.raises(UserError, match="not a readable pickle"):
        fmt.read_split(tmp_path, "train")


def test_data_module_batches(tmp_path):
    generate_cifar100(tmp_path, train_per_class=1, test_per_class=1)
    dm = Cifar100DataModule(DataConfig(root=str(tmp_path), batch_size=10, num_workers=0))
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (10, 3, 32, 32) and y.shape == (10,)
    assert abs(float(x.mean())) < 2.0
