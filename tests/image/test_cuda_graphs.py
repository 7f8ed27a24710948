"""trainer.cuda_graphs (cluster_train/image/cuda_graphs.py): which steps count as launch-bound, where graphs are not
tried, and the probe's wiring through a real fit. The graphs themselves need CUDA: `make bench` on a GPU records each
model's decision and speed (benchmarks/results/vm-h100-2026-11-27.json)."""
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from cluster_train.image import cuda_graphs
from cluster_train.image.cuda_graphs import PROBE, SKIP, CudaGraphs, launch_bound
from cluster_train.image.lit import Classifier
from cluster_train.image.speed import speed_callbacks
from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError


@pytest.mark.parametrize("issue_ms, step_ms, expected", [
    (21.16, 21.22, True),  # MobileNet-v3-Small, batch 32, H100: the GPU waited for every launch
    (35.46, 35.52, True),  # EfficientNet-B0, batch 16
    (10.69, 15.99, False),  # WRN-28-10, batch 128: the GPU ran 5 ms past the host's last launch
    (24.45, 64.71, False),  # ResNet-50, batch 256
])
def test_a_step_is_launch_bound_where_the_gpu_ends_with_the_hosts_issuing(issue_ms, step_ms, expected):
    assert launch_bound([issue_ms] * PROBE, [step_ms] * PROBE) is expected


@pytest.mark.parametrize("args, why_not", [
    (("auto", "ddp", 1, False, True), None),
    (("auto", "single", 1, False, False), "no GPU"),
    (("auto", "zero2", 1, False, True), "strategy zero2"),
    (("auto", "ddp", 4, False, True), "accumulate_grad_batches=4"),
    (("auto", "ddp", 1, True, True), "trainer.compile=true (set trainer.cuda_graphs=always for its graphs)"),
    (("never", "ddp", 1, False, True), "trainer.cuda_graphs=never"),
    (("always", "ddp", 1, False, True), None),
])
def test_graphs_are_tried_only_where_they_can_replay_the_step(args, why_not):
    assert CudaGraphs(*args).why_not == why_not


def test_always_without_a_gpu_ends_with_one_line():
    t = cfg.resolve({"trainer": {"cuda_graphs": "always"}}).trainer
    with pytest.raises(UserError, match="trainer.cuda_graphs=always but this run has no GPU"):
        speed_callbacks(t, "cpu")


def test_the_probe_times_steps_after_the_first_and_compiles_a_launch_bound_model_in_place(monkeypatch):
    """A CPU step is synchronous, so the host's issuing is the whole step: launch-bound by the probe's own measure."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    compiled = []
    monkeypatch.setattr(cuda_graphs, "compile_for_graphs", lambda module: compiled.append(module.global_step))
    probe = CudaGraphs("auto", "single", 1, False, gpu=True)
    model = Classifier(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)), cfg.OptimConfig(lr=0.1))
    data = TensorDataset(torch.randn(80, 3, 2, 2), torch.randint(0, 3, (80,)))
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", callbacks=[probe], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, log_every_n_steps=1000)
    trainer.fit(model, DataLoader(data, batch_size=4))
    facts = probe.facts()
    assert (facts["used"], facts["probed_steps"]) == (True, PROBE)
    assert compiled == [SKIP + PROBE]  # once, after the probe's last step
    assert facts["host_issue_ms"] <= facts["step_ms"]
