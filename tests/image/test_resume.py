"""Issue 10, inside the container: atomic checkpoints, a full disk, NaN loss, Slurm's in-container requeue off,
metrics.csv kept across segments (fast, in process); stop-on-signal and resume of classify, video_suite and 2 ranks
(slow, `python -m train fit` in subprocesses, as the job scripts run it)."""
import contextlib
import errno
import os
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from cluster_train.shared import config as cfg, exit_codes  # noqa: E402
from cluster_train.image import stop
from cluster_train.image.checkpoint_io import AtomicCheckpointIO  # noqa: E402


@pytest.fixture(autouse=True)
def own_signal_handlers(stop_handlers_restored):
    """The Trainers built here install the stop handlers in pytest's own process."""


def checkpoint(step):
    return {"global_step": step, "weights": torch.full((256, 256), float(step))}


def test_checkpoint_save_is_atomic_and_loads(tmp_path):
    io, path = AtomicCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint(checkpoint(1), path)
    io.save_checkpoint(checkpoint(2), path)
    assert io.load_checkpoint(path)["global_step"] == 2
    assert os.listdir(path.parent) == ["last.ckpt"]  # no temporary file left behind


SAVE_THEN_HANG = """
import os, sys, time
import torch
import cluster_train.image.checkpoint_io as ckio

def hang(fd):  # the new bytes are written, not yet synced nor renamed: where a kill -9 hurts most
    print("writing", flush=True)
    time.sleep(60)

ckio.os.fsync = hang
ckio.AtomicCheckpointIO().save_checkpoint({"global_step": 2, "weights": torch.zeros(256, 256)}, sys.argv[1])
"""


@pytest.mark.slow
def test_kill_9_during_a_save_leaves_the_previous_checkpoint(tmp_path):
    from conftest import ROOT

    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(checkpoint(1), path)
    before = path.read_bytes()
    child = subprocess.Popen([sys.executable, "-c", SAVE_THEN_HANG, str(path)], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline() == "writing\n"
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    assert path.read_bytes() == before  # untouched: the half-done save is a temporary file beside it
    assert AtomicCheckpointIO().load_checkpoint(path)["global_step"] == 1
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "last.ckpt"]
    assert leftovers and all(name.startswith(".last.ckpt.tmp-") for name in leftovers)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs when we may mount one (root), else None (the test simulates ENOSPC)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mnt)],
                                                   capture_output=True).returncode == 0
    yield mnt if mounted else None
    if mounted:
        subprocess.run(["umount", str(mnt)], check=True)


def test_full_disk_keeps_the_previous_checkpoint_and_says_so(tiny_disk, tmp_path, monkeypatch, capsys):
    io = AtomicCheckpointIO()
    small, big = {"global_step": 1, "w": torch.zeros(1000)}, {"global_step": 2, "w": torch.zeros(400_000)}  # 1.6 MB
    path = (tiny_disk or tmp_path) / "last.ckpt"
    io.save_checkpoint(small, path)
    if tiny_disk is None:
        import cluster_train.image.checkpoint_io as ckio

        def no_space(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(ckio.os, "fsync", no_space)
    with pytest.raises(SystemExit) as stopped:
        io.save_checkpoint(big, path)
    assert stopped.value.code == exit_codes.DISK_FULL
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"[cluster-train] error: disk full writing {path} (")
    assert err[0].endswith(" MB free); free space or move the run")
    monkeypatch.undo()
    assert io.load_checkpoint(path)["global_step"] == 1
    assert os.listdir(path.parent) == ["last.ckpt"]


def test_slurm_in_container_requeue_is_off(tmp_path, monkeypatch):
    """Under Slurm, Lightning would install a SIGUSR1 handler that runs `scontrol requeue` (absent in the image) and
    a SIGTERM one of its own; ours stay, and its SLURMEnvironment has auto_requeue off."""
    from pytorch_lightning.plugins.environments import SLURMEnvironment

    from cluster_train.image.trainer import build_trainer

    for key, value in dict(SLURM_NTASKS="1", SLURM_JOB_NAME="train", SLURM_JOB_ID="42", SLURM_PROCID="0",
                           SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NODELIST="localhost").items():
        monkeypatch.setenv(key, value)
    run = cfg.resolve({"output_dir": str(tmp_path), "trainer": {"accelerator": "cpu", "strategy": "single"}})
    trainer = build_trainer(run, tmp_path)
    env = trainer._accelerator_connector.cluster_environment
    assert isinstance(env, SLURMEnvironment) and env.auto_requeue is False
    stop.install()
    trainer._signal_connector.register_signal_handlers()  # what Trainer.fit does before training
    assert stop.installed(), {sig: signal.getsignal(sig) for sig in stop.SIGNALS}
    os.kill(os.getpid(), signal.SIGUSR1)  # only asks for a stop now
    assert stop.requested() == "SIGUSR1"


def test_metrics_csv_keeps_every_segments_rows(tmp_path):
    from cluster_train.image.csv_append import AppendingCSVLogger

    for segment, step in ((1, 0), (2, 1)):
        logger = AppendingCSVLogger(tmp_path, name="", version="")
        logger.log_metrics({"train/loss": float(segment)}, step=step)
        if segment == 2:
            logger.log_metrics({"val/loss": 9.0}, step=step)  # a new column widens the header, rows stay
        logger.save()
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "step,train/loss,val/loss"
    assert rows[1:] == ["0,1.0,", "1,2.0,", "1,,9.0"]


def test_a_segment_resumed_after_a_crash_logs_each_step_once(tmp_path):
    """The first segment dies (here: an error) in epoch 3, after its row of step 4 was written but with
    last.ckpt still at epoch 2's end (step 4); the next segment trains step 4 again: metrics.csv holds each
    step's training row once."""
    import csv

    from torch.utils.data import DataLoader, TensorDataset

    from cluster_train.image.lit import Classifier
    from cluster_train.image.trainer import build_trainer, resume_from

    class Crashes(Classifier):
        def training_step(self, batch, batch_idx):
            if self.global_step == 5:
                raise RuntimeError("the rank dies")
            return super().training_step(batch, batch_idx)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    run = cfg.resolve({"output_dir": str(tmp_path), "optim": {"name": "sgd", "lr": 0.1, "scheduler": "none"},
                       "trainer": {"accelerator": "cpu", "strategy": "single", "max_epochs": 4,
                                   "log_every_n_steps": 1}})
    last = tmp_path / "checkpoints" / "last.ckpt"
    for model in (Crashes, Classifier):
        loaders = DataLoader(data, batch_size=8), DataLoader(data, batch_size=8)
        with pytest.raises(RuntimeError) if model is Crashes else contextlib.nullcontext():
            build_trainer(run, tmp_path).fit(model(torch.nn.Linear(4, 2), run.optim), *loaders,
                                             ckpt_path=resume_from(last))
        if model is Crashes:
            assert torch.load(last, weights_only=True)["global_step"] == 4
    with (tmp_path / "metrics.csv").open() as f:
        steps = [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]
    assert steps == list(range(8)), steps


def test_nan_loss_ends_the_run_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    from torch.utils.data import DataLoader, TensorDataset

    from cluster_train.image.lit import Classifier
    from cluster_train.image.trainer import build_trainer

    class Diverges(Classifier):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return loss * float("inf") if self.global_step == 2 else loss

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    run = cfg.resolve({"output_dir": str(tmp_path), "optim": {"name": "sgd", "lr": 0.1, "scheduler": "none"},
                       "trainer": {"accelerator": "cpu", "strategy": "single", "max_epochs": 4}})
    trainer = build_trainer(run, tmp_path)
    last = tmp_path / "checkpoints" / "last.ckpt"
    with pytest.raises(SystemExit) as stopped:
        trainer.fit(Diverges(torch.nn.Linear(4, 2), run.optim), DataLoader(data, batch_size=8),
                    DataLoader(data, batch_size=8))
    assert stopped.value.code == exit_codes.NAN_LOSS
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[cluster-train]")]
    assert err == [f"[cluster-train] error: loss became inf at step 3 (epoch 2); last good checkpoint: {last}"]
    assert torch.load(last, weights_only=True)["global_step"] == 2  # epoch 1's, not overwritten with inf weights
