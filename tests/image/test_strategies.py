"""Every registered strategy trains for real on 2 CPU ranks (gloo) and matches 1-process training on the same global
batch. On CPU, "fsdp" and zero* run Lightning's FSDP and DeepSpeed strategies with only their CUDA checks relaxed
(Lightning refuses the CPU for both): the same classes GPU jobs use."""
import os

import pytest
import torch

from cluster_train.shared import config as cfg
from cluster_train.image.localrun import spawn
from cluster_train.shared.strategies import STRATEGIES

# real multi-process training, which make test runs inside the image (test_in_image.py) and not here again
pytestmark = [pytest.mark.slow, pytest.mark.image_copy]

N_SAMPLES, GLOBAL_BATCH, ACCUMULATE, EPOCHS = 64, 16, 2, 2
LOSS_RTOL = 1e-4  # fp32 on both sides: only the order of the gradient reduction differs

os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/torch_extensions"))


def make_data():
    import torch.utils.data as tud

    g = torch.Generator().manual_seed(0)
    x = torch.randn(N_SAMPLES, 16, generator=g)
    y = x[:, :4].argmax(1)  # learnable, so the loss visibly falls
    return tud.TensorDataset(x, y, torch.arange(N_SAMPLES))


def tiny_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def train_worker(rank, strategy, nprocs, out, extra):
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, DistributedSampler

    from cluster_train.image.trainer import build_trainer
    from cluster_train.image.lit import Classifier

    class Recording(Classifier):
        records = []

        def training_step(self, batch, batch_idx):
            x, y, idx = batch
            loss = F.cross_entropy(self.model(x), y)
            self.records.append((self.current_epoch, batch_idx, idx.tolist(), float(loss.detach())))
            return loss

        def validation_step(self, batch, batch_idx):
            x, y, _ = batch
            self.log("val/loss", F.cross_entropy(self.model(x), y), sync_dist=True)

    run = cfg.resolve(
        {
            "output_dir": str(out),
            "optim": {"name": "sgd", "lr": 0.5, "momentum": 0.9, "weight_decay": 0.0, "scheduler": "none"},
            "trainer": {
                "accelerator": "cpu", "devices": nprocs, "strategy": strategy, "max_epochs": EPOCHS,
                "accumulate_grad_batches": ACCUMULATE, "gradient_clip_val": 0.5, "limit_val_batches": 1,
                "log_every_n_steps": 1, **extra,
            },
        }
    )
    module = Recording(tiny_net(), run.optim)
    data = make_data()
    micro = GLOBAL_BATCH // ACCUMULATE // nprocs
    trainer = build_trainer(run, out)
    # Lightning would shuffle; a sequential DistributedSampler makes rank r's micro-batches known in advance
    sampler = DistributedSampler(data, num_replicas=nprocs, rank=rank, shuffle=False)
    loader = DataLoader(data, batch_size=micro, sampler=sampler)
    trainer.fit(module, loader, DataLoader(data, batch_size=micro))
    from cluster_train.image.memory import state_bytes

    return {"records": module.records, "state": state_bytes(module, trainer.optimizers[0])}


def by_step(results):
    """{(epoch, micro-batch): (sorted sample indices over all ranks, mean loss over ranks)}."""
    steps = {}
    for result in results:
        for epoch, batch, idx, loss in result["records"]:
            steps.setdefault((epoch, batch), []).append((idx, loss))
    return {k: (sorted(i for idx, _ in v for i in idx), sum(l for _, l in v) / len(v)) for k, v in steps.items()}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """name -> each rank's result of a 2-rank run, run once per module (the memory test reuses them)."""
    cache = {}

    def run(name):
        if name not in cache:
            cache[name] = spawn(train_worker, 2, name, 2, tmp_path_factory.mktemp(name), {})
        return cache[name]

    return run


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return by_step(spawn(train_worker, 1, "single", 1, tmp_path_factory.mktemp("single"), {}))


@pytest.mark.parametrize("name", [n for n in STRATEGIES.names() if n != "single"])
def test_two_ranks_match_one_process(name, reference, two_ranks):
    got = by_step(two_ranks(name))
    assert got.keys() == reference.keys()
    for epoch in range(EPOCHS):
        seen = sorted(i for (e, _), (idx, _) in got.items() if e == epoch for i in idx)
        assert seen == list(range(N_SAMPLES)), f"{name}: epoch {epoch} dropped or duplicated samples"
    for key in reference:
        assert got[key][0] == reference[key][0], f"{name}: micro-batch {key} saw other samples"
        assert got[key][1] == pytest.approx(reference[key][1], rel=LOSS_RTOL), f"{name}: loss diverged at {key}"
    # epoch 1's losses come after 4 optimizer steps: they only match if gradients were synchronised across ranks
    assert reference[(1, 0)][1] < 0.9 * reference[(0, 0)][1], "the reference did not train"


def test_zero3_holds_less_state_per_rank_than_ddp(two_ranks):
    """Measured from the live tensors each rank holds after training
    (cluster_train.image.memory), not from ZeRO's theory."""
    ddp = [r["state"] for r in two_ranks("ddp")]
    zero3 = [r["state"] for r in two_ranks("zero3")]
    print(f"per-rank state bytes: ddp {ddp}, zero3 {zero3}")
    for d, z in zip(ddp, zero3):
        assert z["param_bytes"] < 0.6 * d["param_bytes"]
        assert z["optimizer_state_bytes"] < 0.6 * d["optimizer_state_bytes"]
        assert z["total_bytes"] < 0.8 * d["total_bytes"]


def test_deepspeed_flops_profiler_option_prints_a_profile(tmp_path, capfd):
    spawn(train_worker, 1, "zero1", 1, tmp_path, {"flops_profiler": True})
    assert "DeepSpeed Flops Profiler" in capfd.readouterr().out
