"""GPU speed by default (cluster_train/image/speed.py): precision `auto`, channels-last convolution weights,
torch.compile, and the measured input wait in results.json. The GPU side (bf16, Tensor Core layouts) runs in `make
bench` on a GPU; here the same code paths run on the CPU (torch.compile under DDP and channels-last under ZeRO: in
test_compile_ddp.py and test_zero_layout.py, which make test runs inside the image)."""
import time
import types

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from cluster_train.shared import config as cfg
from cluster_train.image.cli import make_data
from cluster_train.shared.errors import UserError
from cluster_train.image.fit import fit
from cluster_train.image.lit import Classifier
from cluster_train.shared.models import MODELS
from cluster_train.image.speed import InputWait, batch_size, precision_for, resolved, to_channels_last

TINY = {"depth": 8, "width": 4}


def test_defaults_resolve_to_32_bit_and_no_layout_change_on_cpu():  # GPUs: test_explicit_bf16...
    t = cfg.resolve({}).trainer
    assert (t.precision, t.channels_last, t.compile) == ("auto", True, False)
    assert (resolved(t, "cpu").precision, resolved(t, "cpu").channels_last) == ("32", False)


def test_explicit_bf16_on_a_gpu_without_it_ends_with_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-32GB")
    assert precision_for("auto", "gpu") == "32"
    with pytest.raises(UserError, match=r"bf16-mixed but the Tesla V100-SXM2-32GB \(compute capability 7.0\)"):
        precision_for("bf16-mixed", "gpu")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert precision_for("auto", "gpu") == precision_for("auto", "cuda") == "bf16-mixed"  # both names of the GPU


def test_channels_last_converts_2d_and_3d_convolutions_of_one_model():
    net = torch.nn.Sequential(torch.nn.Conv3d(3, 4, 3), torch.nn.Flatten(0, 1), torch.nn.Conv2d(4, 4, 3))
    assert to_channels_last(net) == 2
    assert net[0].weight.is_contiguous(memory_format=torch.channels_last_3d)
    assert net[2].weight.is_contiguous(memory_format=torch.channels_last)
    assert not net[2].weight.is_contiguous()


class SlowSamples(Dataset):
    def __init__(self, read_s: float = 0.01):
        self.read_s = read_s

    def __len__(self):
        return 32

    def __getitem__(self, i):
        time.sleep(self.read_s)  # a data set read from a slow disk
        return torch.randn(16), i % 4


def input_wait(dataset, throughput=None) -> dict:
    wait = InputWait()
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[wait])
    net = torch.nn.Sequential(torch.nn.Linear(16, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    trainer.fit(Classifier(net, cfg.OptimConfig(scheduler="none")), DataLoader(dataset, batch_size=8))
    if throughput is not None:
        throughput.update(wait.throughput(world_size=3))
    return wait.summary(num_workers=0)


def test_a_run_resumed_mid_epoch_counts_from_its_first_step():
    """Lightning restores a mid-epoch checkpoint into the epoch: a step may come before any epoch start."""
    wait, trainer = InputWait(), types.SimpleNamespace(current_epoch=3)
    wait.on_train_batch_start(trainer, None, [torch.zeros(4, 2)], 0)
    wait.on_train_batch_end(trainer, None, None, [torch.zeros(4, 2)], 0)
    assert wait.epochs[3][0] == 4 and wait.throughput(world_size=2)["epochs_measured"] == 1


def test_throughput_counts_the_samples_of_the_epochs_after_the_first_over_all_ranks():
    found = {}
    input_wait(SlowSamples(), found)  # 32 samples an epoch, each at least 10 ms to read
    per_rank = found["samples_per_s_per_rank"]
    assert found["epochs_measured"] == 1 and found["world_size"] == 3
    assert 40 < per_rank <= 100, found  # 32 samples in at least 0.32 s, and the loop adds little
    assert found["samples_per_s"] == pytest.approx(3 * per_rank, rel=0.01)
    assert batch_size({"x": torch.zeros(5, 2)}) == 5 and batch_size([torch.zeros(7), 1]) == 7


def test_input_wait_tells_a_slow_loader_from_a_fast_one():
    # 50 ms a sample: the slow loader's 3.2 s of sleeping dwarf what a loaded machine adds to the fast one's waits (CI
    # saw 0.17 s at a load of 10 on 2 cores, against 0.71 s for 10 ms a sample)
    slow = input_wait(SlowSamples(read_s=0.05))
    fast = input_wait(TensorDataset(torch.randn(32, 16), torch.randint(0, 4, (32,))))
    assert slow["steps"] == fast["steps"] == 8
    # the verdict and the data waits' ratio, not a share of wall time: a loaded machine slows the compute too (CI
    # saw a slow loader's share at 0.46 under load; a fast loader's 1 ms of waiting is a large share of tiny steps)
    assert slow["input_bound"], slow
    assert fast["data_wait_s"] < slow["data_wait_s"] / 5, (fast, slow)


@pytest.fixture(scope="module")
def tiny_cifar(tmp_path_factory):
    return make_data_dir(tmp_path_factory.mktemp("speed") / "data")


def make_data_dir(root):
    make_data("cifar100", str(root), train_per_class=1, test_per_class=1)
    return root


def tiny_run(data, out, **trainer) -> cfg.RunConfig:
    return cfg.resolve({"output_dir": str(out), "model": {"params": TINY},
                        "data": {"root": str(data), "batch_size": 25, "num_workers": 1},
                        "trainer": {"max_epochs": 1, "strategy": "single", "accelerator": "cpu", **trainer}})


def test_results_say_how_the_run_trained_and_whether_it_waited_for_data(tiny_cifar, tmp_path):
    results = fit(tiny_run(tiny_cifar, tmp_path))
    assert (results["precision"], results["channels_last_layers"], results["compiled"]) == ("32-true", 0, False)
    assert results["input"]["steps"] == 4 and results["input"]["num_workers"] == 1
    assert 0 <= results["input"]["wait_fraction"] <= 1
    assert_host_memory(results, ranks=1)
    fresh = MODELS.build("resnet_cifar", num_classes=100, **TINY)
    fresh.load_state_dict(torch.load(results["weights"]))


def assert_host_memory(results, ranks):
    """Each rank's PSS peaks and its dataloader workers' (num_workers=1: the training and the validation loader's)."""
    memory = results["host_memory"]
    assert (memory["measure"], memory["num_workers"]) == ("pss", 1)
    assert [r["rank"] for r in memory["ranks"]] == list(range(ranks)), memory
    for rank in memory["ranks"]:
        assert rank["workers_seen"] >= 1, memory
        assert 0 < rank["worker_peak_gb"] < rank["total_peak_gb"] < 8, memory  # a fork shares most of its rank's
        assert 0 < rank["peak_gb"] <= rank["total_peak_gb"], memory
    assert memory["rank_peak_gb"] == max(r["peak_gb"] for r in memory["ranks"])
    assert memory["worker_peak_gb"] == max(r["worker_peak_gb"] for r in memory["ranks"])
