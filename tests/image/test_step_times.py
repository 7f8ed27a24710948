"""Issue 43, stragglers (cluster_train/image/step_times.py): the rule, and a 2-rank DDP run (gloo) whose rank 1 is
slowed is flagged with its host in results.json."""
import time

import pytest
from pytorch_lightning.callbacks import Callback

from image.test_speed import TINY, make_data_dir
from cluster_train.shared import config as cfg
from cluster_train.image.step_times import StepTimes, straggler


def rank(r, median_ms, host=None):
    return {"rank": r, "host": host or f"n{r}", "median_ms": median_ms, "p90_ms": median_ms, "steps": 10}


def test_a_rank_125_times_the_median_of_medians_is_the_straggler():
    assert straggler([rank(0, 100.0), rank(1, 100.0), rank(2, 125.0)]) == {"rank": 2, "host": "n2", "times": 1.25}
    assert straggler([rank(0, 100.0), rank(1, 100.0), rank(2, 124.0)]) is None  # just under the ratio
    assert straggler([rank(0, 100.0), rank(1, 300.0), rank(2, 200.0)])["rank"] == 1  # the slowest of two above it


def test_one_rank_or_untimed_ranks_name_no_straggler():
    assert straggler([rank(0, 100.0)]) is None
    assert straggler([rank(0, 100.0), rank(1, None)]) is None
    assert straggler([]) is None


def test_a_rank_times_its_forward_not_the_wait_before_it_nor_validation():
    import torch

    times, net = StepTimes(), torch.nn.Linear(2, 2)
    times.on_train_start(None, torch.nn.Sequential(net))
    for wait, forward in ((0.2, 0.02), (0.2, 0.02), (0.0, 0.06)):
        times.on_train_batch_start(None, None, None, 0)
        time.sleep(wait)  # DDP's buffer broadcast: waiting for another rank
        net(torch.zeros(1, 2))
        time.sleep(forward)
        net(torch.zeros(1, 2))  # a second forward within the step: still one step, timed from the first
        times.on_before_backward(None, None, None)
    net(torch.zeros(1, 2))  # validation's forward: no training step
    times.on_train_end(None, None)
    figures = times.figures(rank=3)
    assert figures["steps"] == 3 and figures["rank"] == 3
    assert 20 <= figures["median_ms"] < 60 <= figures["p90_ms"] < 150, figures


class SlowRankOne(Callback):
    """Rank 1's forward takes 0.3 s longer (a slower device or a busy CPU on its node); rank 0 waits for it in the
    step's collectives, which its timing leaves out."""

    def on_train_start(self, trainer, pl_module):
        if trainer.global_rank == 1:
            pl_module.model.register_forward_hook(lambda *args: time.sleep(0.3))


def slowed_rank(rank_id, data, out):
    import cluster_train.image.tasks.classify as classify
    from cluster_train.image.fit import fit

    build = classify.build_trainer
    classify.build_trainer = lambda run, out: build(run, out, callbacks=[SlowRankOne()])
    return fit(cfg.resolve({"output_dir": str(out), "model": {"params": TINY},
                            "data": {"root": str(data), "batch_size": 10, "num_workers": 0},
                            "trainer": {"max_epochs": 1, "strategy": "ddp", "devices": 2, "accelerator": "cpu",
                                        "limit_val_batches": 1}}))


@pytest.mark.slow
def test_a_slowed_rank_of_two_is_flagged_with_its_host(tmp_path):
    import socket

    from cluster_train.image.localrun import spawn

    results = spawn(slowed_rank, 2, make_data_dir(tmp_path / "data"), tmp_path / "run")[0]
    spread = results["step_times"]
    assert [r["rank"] for r in spread["ranks"]] == [0, 1] and all(r["steps"] == 5 for r in spread["ranks"]), spread
    assert spread["ranks"][1]["median_ms"] >= 300, spread
    assert spread["straggler"] is not None and spread["straggler"]["rank"] == 1, spread
    assert spread["straggler"]["host"] == socket.gethostname() and spread["straggler"]["times"] >= 1.25, spread


def test_a_submodule_compiled_during_training_loses_its_hook():
    """trainer.cuda_graphs compiles the model after its first steps: a hook inside the compiled call would be traced."""
    import torch

    times, net = StepTimes(), torch.nn.Linear(2, 2)
    times.on_train_start(None, torch.nn.Sequential(net))
    assert len(net._forward_pre_hooks) == 1
    net._compiled_call_impl = net._call_impl  # what Module.compile sets (compiling itself would take seconds here)
    times.on_train_batch_start(None, None, None, 0)
    assert len(net._forward_pre_hooks) == 0 and times._hooks == {}
