"""Issue 43, lost work bounded (trainer.checkpoint_every, cluster_train/image/trainer.py): a run killed with SIGKILL
mid-epoch (no warning, no save of its own) loses at most one interval of steps, records them (`lost_steps`), and its
resumed result is bit-identical to an uninterrupted run's; the save is written in the background, atomically."""
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import torch

from conftest import ROOT, assert_same_run
from cluster_train.shared import config as cfg
from cluster_train.shared.checkpoint_every import interval
from cluster_train.shared.errors import UserError


@pytest.mark.parametrize("value, expected", [(500, (500, None)), ("500", (500, None)), ("90s", (None, 90.0)),
                                             ("20m", (None, 1200.0)), ("2h", (None, 7200.0)), (None, (None, None))])
def test_checkpoint_every_is_steps_or_a_duration(value, expected):
    assert interval(value) == expected
    assert cfg.resolve({"trainer": {"checkpoint_every": value}}).trainer.checkpoint_every == value


@pytest.mark.parametrize("value", [0, -5, 1.5, "20 minutes", "0s", "abc", True, [1]])
def test_a_bad_checkpoint_every_is_refused_in_one_line(value):
    with pytest.raises(UserError) as refused:
        cfg.resolve({"trainer": {"checkpoint_every": value}})
    assert str(refused.value).count("\n") == 0 and "trainer.checkpoint_every" in str(refused.value)
    assert "like 90s, 20m or 2h" in str(refused.value)


def test_the_save_is_written_in_the_background_and_appears_whole(tmp_path, monkeypatch):
    """single and ddp: save_checkpoint returns while the file is still being written (the step goes on); the file
    appears under its name only once whole. DeepSpeed and FSDP keep the synchronous plugin."""
    import cluster_train.image.checkpoint_io as ckio
    from cluster_train.image.trainer import checkpoint_io

    release, write = threading.Event(), ckio.atomic_write_bytes
    monkeypatch.setattr(ckio, "atomic_write_bytes", lambda path, data: release.wait(30) and write(path, data))
    trainer = cfg.resolve({"trainer": {"strategy": "ddp", "checkpoint_every": "20m"}}).trainer
    io, path = checkpoint_io(trainer), tmp_path / "last.ckpt"
    weights = torch.ones(64)
    io.save_checkpoint({"global_step": 5, "w": weights}, path)
    weights.add_(1)  # the training step goes on changing the weights: the save holds the step's copy
    assert not path.exists() and os.listdir(tmp_path) == []  # returned, nothing written yet
    release.set()
    io.teardown()  # what Lightning calls at the end of fit (or of a stop): waits for the save
    assert os.listdir(tmp_path) == ["last.ckpt"]
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.ones(64))
    for strategy, every in (("zero2", "20m"), ("fsdp", 500), ("ddp", None)):
        trainer = cfg.resolve({"trainer": {"strategy": strategy, "checkpoint_every": every}}).trainer
        assert type(checkpoint_io(trainer)) is ckio.AtomicCheckpointIO, strategy


KILLED_AT = """
import os, signal, sys, time
from pathlib import Path
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.plugins.io import AsyncCheckpointIO
import cluster_train.image.tasks.classify as classify
from cluster_train.image.fit import fit
from cluster_train.shared import config as cfg

class KilledAt(Callback):  # stands in for the heartbeat's progress file (contract 1), then dies without a word
    def on_train_batch_end(self, trainer, *args):
        progress = Path(os.environ["CT_RUN_DIR"], "logs", "progress")
        progress.mkdir(parents=True, exist_ok=True)
        now = int(time.time())
        (progress / "rank-0").write_text(f"{trainer.global_step} {now} {now} 0.000 host {os.getpid()}\\n")
        if trainer.global_step == int(sys.argv[2]):
            if isinstance(trainer.strategy.checkpoint_io, AsyncCheckpointIO):
                trainer.strategy.checkpoint_io.teardown()  # a save in flight finishes first: see the test
            os.kill(os.getpid(), signal.SIGKILL)

build = classify.build_trainer
classify.build_trainer = lambda run, out: build(run, out, callbacks=[KilledAt()])
fit(cfg.load(sys.argv[1]))
"""


def run_fit(config, *killer, segment):
    script = ["-c", KILLED_AT, str(config), *killer] if killer else ["-m", "train", "fit", "--config", str(config)]
    env = dict(os.environ, CT_RUN_DIR=str(config.parent / config.stem), CT_SEGMENT=str(segment))
    if killer:  # the stand-in writes the progress file at every step: the heartbeat thread's beat must not come between
        env["CT_HEARTBEAT_S"] = "3600"
    done = subprocess.run([sys.executable, *script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_a_run_killed_mid_epoch_loses_at_most_one_interval_and_ends_bit_identical(tmp_path):
    """checkpoint_every=3 steps, 7 batches an epoch: saves at steps 3, 6, 7 (the epoch end's), 9; SIGKILL at step 11
    (epoch 2, no warning, no save of its own). The next segment resumes from step 9: 2 steps lost (< 3), recorded in
    its train_start line, and the run ends as an uninterrupted one without checkpoint_every does. The kill waits for
    a save still being written: one killed during its write loses that interval too (the previous checkpoint stays
    whole, cluster_train/image/checkpoint_io.py)."""
    from concurrent.futures import ThreadPoolExecutor

    from image.test_requeue import classify_config
    from cluster_train.image.data.cifar100 import generate_cifar100

    data = generate_cifar100(tmp_path / "data", train_per_class=1, test_per_class=1)
    whole = classify_config(tmp_path, "whole", data, max_epochs=2, log_every_n_steps=1)  # a row at every saved step
    cut = classify_config(tmp_path, "cut", data, max_epochs=2, log_every_n_steps=1, checkpoint_every=3)
    with ThreadPoolExecutor(1) as pool:
        uninterrupted = pool.submit(run_fit, whole, segment=1)
        code, out = run_fit(cut, "11", segment=1)
        assert code == -signal.SIGKILL, out[-3000:]
        saved = torch.load(tmp_path / "cut" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
        code, out = run_fit(cut, segment=2)
        assert code == 0, out[-3000:]
        code, whole_out = uninterrupted.result()
        assert code == 0, whole_out[-3000:]
    start = [json.loads(line) for line in (tmp_path / "cut" / "logs" / "segments.jsonl").read_text().splitlines()][-1]
    lost = 11 - saved
    assert (saved, start["resumed_step"], start["lost_steps"]) == (9, 9, 2), \
        f"killed at step 11, last save at step {saved}: {lost} steps lost of an interval of 3; recorded {start}"
    assert_same_run(tmp_path / "whole", tmp_path / "cut")


def test_lost_steps_come_from_the_previous_segments_progress_file(tmp_path):
    from cluster_train.image.guard import lost_steps

    assert lost_steps(tmp_path, 9) is None  # no progress file: the heartbeat never ran
    progress = tmp_path / "logs" / "progress"
    progress.mkdir(parents=True)
    (progress / "rank-0").write_text("")
    assert lost_steps(tmp_path, 9) is None  # an empty file (a node died mid-rename of another file)
    (progress / "rank-0").write_text("14 1700000000 1700000005 0.250 n1 4242\n")
    assert lost_steps(tmp_path, 9) == 5
    assert lost_steps(tmp_path, 20) == 0  # an older segment's file: never below zero


def test_a_duration_saves_after_that_much_training_time(tmp_path):
    """checkpoint_every=1s: step 3 takes 1.1 s, so a save (mid-epoch) comes by its end at the latest: at it, or
    earlier where a loaded machine made steps 1-2 take a second."""
    import time

    from pytorch_lightning.callbacks import Callback
    from torch.utils.data import DataLoader, TensorDataset

    from cluster_train.image.lit import Classifier
    from cluster_train.image.trainer import build_trainer

    last, seen = tmp_path / "checkpoints" / "last.ckpt", {}

    class SlowStepThree(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            trainer.strategy.checkpoint_io.teardown()  # what a save started has written, on disk
            seen[batch_idx] = torch.load(last, weights_only=True)["global_step"] if last.exists() else None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 3:
                time.sleep(1.1)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 4), torch.randint(0, 2, (48,)))
    run = cfg.resolve({"output_dir": str(tmp_path), "optim": {"name": "sgd", "lr": 0.1, "scheduler": "none"},
                       "trainer": {"accelerator": "cpu", "strategy": "single", "max_epochs": 1,
                                   "checkpoint_every": "1s"}})
    build_trainer(run, tmp_path, callbacks=[SlowStepThree()]).fit(
        Classifier(torch.nn.Linear(4, 2), run.optim), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    assert seen[0] is None and 1 <= seen[4] <= 3, seen


def test_the_multi_model_tasks_save_each_models_checkpoint_on_the_schedule(tmp_path):
    from cluster_train.image.tasks.common import model_checkpoint, trainer
    from cluster_train.image.trainer import SaveBetween

    run = cfg.resolve({"output_dir": str(tmp_path), "trainer": {"accelerator": "cpu", "strategy": "single",
                                                                "checkpoint_every": 200}})
    saves = [c for c in trainer(run, tmp_path, "expert_1").callbacks if isinstance(c, SaveBetween)]
    assert [(s.dirpath, s.filename, s._every_n_train_steps) for s in saves] == [
        (str(model_checkpoint(tmp_path, "expert_1").parent), "last", 200)]


def test_the_warnings_save_is_on_disk_whole_before_the_exit_with_background_saves(tmp_path, capsys):
    """With checkpoint_every (AsyncCheckpointIO), a stop request still leaves last.ckpt at the stop's step when the
    process exits 75: Lightning's teardown waits for the writing thread."""
    from pytorch_lightning.callbacks import Callback
    from torch.utils.data import DataLoader, TensorDataset

    from cluster_train.shared import exit_codes
    from cluster_train.image import stop
    from cluster_train.image.lit import Classifier
    from cluster_train.image.trainer import build_trainer

    class WarnedAtStep2(Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2:
                stop._received.append("SIGUSR1")  # what the handler of the job's warning records

    saved = {sig: signal.getsignal(sig) for sig in stop.SIGNALS}
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 4), torch.randint(0, 2, (48,)))
    run = cfg.resolve({"output_dir": str(tmp_path), "optim": {"name": "sgd", "lr": 0.1, "scheduler": "none"},
                       "trainer": {"accelerator": "cpu", "strategy": "single", "max_epochs": 2,
                                   "checkpoint_every": 100}})
    try:
        with pytest.raises(SystemExit) as stopped:
            build_trainer(run, tmp_path, callbacks=[WarnedAtStep2()]).fit(
                Classifier(torch.nn.Linear(4, 2), run.optim), DataLoader(data, batch_size=8))
    finally:
        stop.reset()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert stopped.value.code == exit_codes.REQUEUE
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    assert "at step 3 (epoch 1)" in capsys.readouterr().out
