"""Channels-last under DeepSpeed ZeRO (cluster_train/image/speed.py): DeepSpeed broadcasts each weight as bytes at its
start, which a channels-last weight cannot be viewed as (every ZeRO run on the H200 failed there, 2026-11-26), so the
layout reaches the convolutions through their inputs. Run inside the image, where DeepSpeed's CPU comm op is already
built (a new host venv builds it again: about 30 s)."""
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from cluster_train.shared import config as cfg
from cluster_train.image.lit import Classifier
from cluster_train.image.localrun import spawn

# DeepSpeed's start in its own process, which make test runs inside the image (test_in_image.py) and not here again
pytestmark = [pytest.mark.slow, pytest.mark.image_copy]


def zero_channels_last_rank(rank):
    """One step of ZeRO-2 with channels-last on."""
    from cluster_train.image.speed import FastLayout
    from cluster_train.shared.strategies import STRATEGIES

    t = cfg.TrainerConfig(accelerator="cpu", devices=1, strategy="zero2")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 4))
    seen = []
    net[0].register_forward_hook(lambda layer, args,
                                 out: seen.append(out.is_contiguous(memory_format=torch.channels_last)))
    layout = FastLayout(channels_last=True, compile=False)
    trainer = pl.Trainer(accelerator="cpu", devices=1, strategy=STRATEGIES.build("zero2", accelerator="cpu", trainer=t),
                         max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[layout])
    data = TensorDataset(torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,)))
    trainer.fit(Classifier(net, cfg.OptimConfig(scheduler="none")), DataLoader(data, batch_size=4))
    return layout.converted, net[0].weight.is_contiguous(), seen


def test_channels_last_under_zero_reaches_the_convolutions_through_their_inputs(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    converted, weight_contiguous, seen = spawn(zero_channels_last_rank, 1)[0]
    assert converted == 1 and weight_contiguous and seen[-1] is True
