"""Issue 10: `python -m train fit` stopped by SIGUSR1 (the job's time-limit warning) saves, exits 75, and the next
segment resumes from the newest save; video_suite does not retrain the models it finished, and 2 ranks agree on the
step. Subprocesses, as the job scripts run it. That a run stopped twice mid-epoch ends bit-identical to an
uninterrupted one is proven through the job scripts on Slurm and the LSF stand-in (tests/cluster/test_long_runs.py)."""
import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from cluster_train.shared import exit_codes
from cluster_train.image.localrun import free_port

pytestmark = pytest.mark.slow  # several real `fit` processes: `make test`, not `make test-fast`


def write_config(tmp_path, name, **raw):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(raw, output_dir=str(tmp_path / name))))
    return path


def fit(config, signal_on=None, env=None, ranks=1):
    """Run `python -m train fit` (ranks processes, launched like srun does); when a line containing signal_on
    appears, send SIGUSR1 to the last rank only (the others must still stop at the same step). Exit codes, output."""
    port, procs = free_port(), []
    for rank in range(ranks):
        rank_env = dict(os.environ, CT_RUN_DIR=str(config.parent / config.stem), **(env or {}))
        if ranks > 1:
            rank_env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(ranks), RANK=str(rank),
                            LOCAL_RANK=str(rank), NODE_RANK="0", USE_LIBUV="0")
        procs.append(subprocess.Popen([sys.executable, "-m", "train", "fit", "--config", str(config)], cwd=ROOT,
                                      env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    lines = []
    for line in procs[-1].stdout:
        lines.append(line)
        if signal_on and signal_on in line:
            procs[-1].send_signal(signal.SIGUSR1)
            signal_on = None
    outputs = [p.stdout.read() for p in procs[:-1]]
    codes = [p.wait(timeout=600) for p in procs]
    return codes, "".join(outputs) + "".join(lines)


def segments(run_dir):
    return [json.loads(line) for line in (run_dir / "logs" / "segments.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    from cluster_train.image.data.cifar100 import generate_cifar100

    return generate_cifar100(tmp_path_factory.mktemp("cifar"), train_per_class=1, test_per_class=1)


def classify_config(tmp_path, name, data, **trainer):
    return write_config(tmp_path, name, seed=3, model={"params": {"depth": 8, "width": 4}},
                        data={"root": str(data), "batch_size": 16, "num_workers": 0},
                        optim={"name": "adamw", "lr": 0.01},
                        trainer=dict({"max_epochs": 3, "accelerator": "cpu", "strategy": "single"}, **trainer))


def test_every_interruption_resumes_from_the_newest_checkpoint(tmp_path, cifar):
    """Stopped in epoch 2 (before any epoch-end save), then again in epoch 4 of the resumed segment: the third
    segment resumes from the second stop, not from the first (Lightning's version counter would have written
    last-v1.ckpt and left last.ckpt behind)."""
    cut = classify_config(tmp_path, "twice", cifar, max_epochs=5, limit_train_batches=3, log_every_n_steps=10)
    codes, out = fit(cut, signal_on="[cluster-train] epoch 1/5", env={"CT_SEGMENT": "1"})
    assert codes == [exit_codes.REQUEUE] and "at step 4 (epoch 2)" in out, out[-3000:]
    codes, out = fit(cut, signal_on="[cluster-train] epoch 3/5", env={"CT_SEGMENT": "2"})  # step 10 logs: one more
    assert codes == [exit_codes.REQUEUE] and "at step 11 (epoch 4)" in out, out[-3000:]
    codes, out = fit(cut, env={"CT_SEGMENT": "3"})
    assert codes == [0] and "epoch 5/5 step 15" in out, out[-3000:]
    assert [(s["segment"], s["resumed_step"]) for s in segments(tmp_path / "twice")] == [(1, None), (2, 4), (3, 11)]
    assert sorted(p.name for p in (tmp_path / "twice" / "checkpoints").iterdir()) == [
        "best.ckpt", "initial_validation.json", "last.ckpt"]


def test_video_suite_interrupted_in_model_4_does_not_retrain_1_to_3(tmp_path):
    from cluster_train.image.data.ufc10 import generate_ufc10
    from cluster_train.image.tasks.video_suite import SIX_MODELS

    root = generate_ufc10(tmp_path / "data", train_per_class=2, val_per_class=1, test_per_class=1, frames=8, size=16)
    config = write_config(tmp_path, "run", task="video_suite", task_params={"model_params": {"width": 4, "hidden": 8}},
                          data={"name": "ufc10", "root": str(root), "batch_size": 8, "num_workers": 0},
                          optim={"name": "adamw", "lr": 1e-3},
                          trainer={"max_epochs": 2, "strategy": "single", "accelerator": "cpu"})
    codes, out = fit(config, signal_on=f"video_suite: training {SIX_MODELS[3]}")
    assert codes == [exit_codes.REQUEUE], out[-3000:]
    run = tmp_path / "run"
    first = {p: p.stat().st_mtime_ns for p in (run / "models").iterdir()}
    assert len(first) == 6  # best and final weights of models 1-3
    codes, out = fit(config)
    assert codes == [0], out[-3000:]
    for name in SIX_MODELS[:3]:
        assert f"training {name}" not in out and f"{name}: finished in an earlier segment, skipped" in out
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())
    history = json.loads((run / "checkpoints" / f"{SIX_MODELS[3]}_training_history.json").read_text())
    assert history["epoch"] == [0, 1]  # the resumed model's history holds both epochs
    summary = out[out.index("FINAL RESULTS SUMMARY"):]
    assert all(name in summary for name in SIX_MODELS)
    assert set(json.loads((run / "results.json").read_text())["test_acc"]) == set(SIX_MODELS)
    assert segments(run)[1]["resumed_step"] == 1  # model 4 resumed after its first step


def test_two_ranks_stop_at_the_same_step_and_exit_75(tmp_path, cifar):
    import torch

    config = classify_config(tmp_path, "run", cifar, devices=2, strategy="ddp")
    codes, out = fit(config, signal_on="[cluster-train] rank 1/2", ranks=2)  # only rank 1 gets the signal
    assert codes == [exit_codes.REQUEUE] * 2, out[-3000:]
    assert "stop requested (another rank)" in out  # rank 0 stopped because rank 1 asked
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert f"at step {saved['global_step']} (epoch 1)" in out
