"""Contract 1 of issue 43: each rank's heartbeat thread writes its progress line and its main thread's stack, keeps
writing ALIVE_TIME while the main thread makes no step, and answers a dump request (cluster_train/image/heartbeat.py).
A fake trainer: the thread reads only global_step, global_rank and callbacks."""
import os
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("pytorch_lightning")
from cluster_train.image import heartbeat  # noqa: E402


def wait_for(check, timeout_s=5.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def beat(tmp_path, monkeypatch):
    monkeypatch.setenv("CT_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("CT_HEARTBEAT_S", "0.1")
    monkeypatch.delenv("CT_LAUNCH", raising=False)
    monkeypatch.setattr(heartbeat, "_beat", [])
    trainer = SimpleNamespace(global_step=7, global_rank=3, callbacks=[])
    started = heartbeat.start(trainer)
    yield started, trainer, tmp_path / "logs" / "progress"
    started.stop()


def fields(progress):
    return (progress / "rank-3").read_text().split()


def test_progress_line_has_six_fields_and_the_resumed_step(beat):
    started, trainer, progress = beat
    assert started in trainer.callbacks
    assert wait_for(lambda: (progress / "rank-3").exists())
    step, progress_time, alive, step_s, host, pid = fields(progress)
    assert (step, step_s, pid) == ("7", "0.000", str(os.getpid()))
    assert abs(int(alive) - time.time()) <= 2 and int(progress_time) <= int(alive) and host
    assert "test_heartbeat.py" in (progress / "rank-3.stack").read_text()  # the main thread's stack


def test_steps_move_progress_and_alive_time_goes_on_without_them(beat):
    started, trainer, progress = beat
    for step in range(8, 16):
        trainer.global_step = step
        started.on_train_batch_end(trainer, None, None, None, step)
        time.sleep(0.01)
    assert wait_for(lambda: fields(progress)[0] == "15")
    assert 0.005 < float(fields(progress)[3]) < 0.5  # the median step time, once 5 steps were timed
    stepped_at = int(fields(progress)[1])
    time.sleep(1.2)  # no step: ALIVE_TIME moves on, PROGRESS_TIME stays
    assert int(fields(progress)[1]) == stepped_at and int(fields(progress)[2]) > stepped_at
    assert "time.sleep" in (progress / "rank-3.stack").read_text()  # the main thread's stack as it waits


def test_a_dump_request_writes_every_threads_stack_into_the_named_directory(beat, tmp_path):
    started, trainer, progress = beat
    assert wait_for(lambda: (progress / "rank-3").exists())
    (progress / "dump").write_text("logs/hang-1\n")
    assert wait_for(lambda: (tmp_path / "logs" / "hang-1" / "rank-3-stacks.txt").exists())
    stacks = (tmp_path / "logs/hang-1/rank-3-stacks.txt").read_text()
    assert "Current thread 0x" in stacks and "Thread 0x" in stacks  # every thread's: its own and the main one
    assert not (tmp_path / "logs/hang-1/rank-3-nccl-trace.pkl").exists()  # no NCCL here


def test_after_training_every_beat_is_progress_and_a_second_training_is_watched_again(beat):
    started, trainer, progress = beat
    assert wait_for(lambda: (progress / "rank-3").exists())
    time.sleep(1.1)
    assert int(fields(progress)[1]) < int(fields(progress)[2])  # training, no step: the silence grows
    started.on_train_end(trainer, None)  # a last validation, the results: no step, and no hang either
    assert wait_for(lambda: int(fields(progress)[1]) == int(fields(progress)[2]))
    again = heartbeat.start(SimpleNamespace(global_step=20, global_rank=3, callbacks=[]))
    assert again is started and wait_for(lambda: fields(progress)[0] == "20") and started.training
    started.stop()
    assert wait_for(lambda: not started._thread.is_alive())


def test_packed_independent_tasks_share_a_run_directory_and_beat_nowhere(tmp_path, monkeypatch):
    monkeypatch.setenv("CT_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("CT_LAUNCH", "independent")
    monkeypatch.setattr(heartbeat, "_beat", [])
    assert heartbeat.start(SimpleNamespace(global_step=0, global_rank=0, callbacks=[])) is None


def test_a_checkpoint_saves_end_is_progress(beat, tmp_path):
    """A save longer than hang_timeout's floor is not a hang: its end moves PROGRESS_TIME."""
    from cluster_train.image.checkpoint_io import AtomicCheckpointIO

    started, trainer, progress = beat
    started.progress_time = 0.0
    AtomicCheckpointIO().save_checkpoint({"step": 7}, tmp_path / "last.ckpt")
    assert (tmp_path / "last.ckpt").exists() and abs(started.progress_time - time.time()) < 5


def test_the_beat_samples_its_gpu_s_power_into_the_run_s_energy_and_outlives_a_reading_that_fails(
        beat, monkeypatch):
    """Issue 46's sampled energy (cluster_train/image/gpu_power.py): each beat adds power x time to the rank's file,
    which the host sums into the run's cost, marked as sampled; NVML failing later stops the readings, not the beat.
    The watts are given here (this machine has no GPU; on one, torch.cuda.power_draw reads NVML)."""
    from cluster_train.host.runs import cost
    from cluster_train.host.runs.manifest import Manifest
    from cluster_train.image import gpu_power

    started, _, progress = beat
    assert gpu_power.meter(str(progress.parent.parent), 3) is None  # no GPU here: no meter, no file
    readings = [250.0] * 4 + [RuntimeError("NVML: GPU is lost")]

    def read_watts():
        reading = readings.pop(0) if readings else 250.0
        if isinstance(reading, Exception):
            raise reading
        return reading

    energy = progress.parent / "energy" / "segment-1-rank-3"
    started.power = gpu_power.PowerMeter(energy, read_watts)
    assert wait_for(lambda: started.power is None, 5)  # four readings, then the failed one ended the sampling
    joules, seconds, samples = energy.read_text().split()
    # seconds are written to 0.1 s: 250 W x 0.05 s is the rounding's most
    assert int(samples) == 4 and abs(float(joules) - 250 * float(seconds)) <= 13 and float(seconds) > 0.2
    alive = fields(progress)[2]
    assert wait_for(lambda: fields(progress)[2] != alive, 3)  # the beat goes on
    spent = cost.run_cost(Manifest({}), [], None, progress.parent.parent)
    assert spent["energy_kwh"] == round(float(joules) / 3.6e6, 6)
    assert "(sampled from the GPUs' power draw)" in cost.cost_line(spent)
