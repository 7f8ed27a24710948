"""Runs longer than their time limit, on the real test Slurm cluster and through the LSF stand-in, inside the image:
each segment is warned before its limit, every rank saves, the job requeues itself, and the run finishes on its own
with the same result as an uninterrupted run of the same config."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import job_logs, manifest, release_requeued, run_cluster
from train.host import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
# enough training for three or more segments on this machine's 2 CPUs, the two runs side by side (measured: 8
# epochs in a first Slurm segment since training steps log without an all-reduce, 1-8 per LSF one, after a ~13 s
# container start and first validation)
EPOCHS = int(os.environ.get("CT_LONG_RUN_EPOCHS", "32"))
LSF_MINUTE_S = 15  # the stand-in's minute here: requeue_1host's 3-minute limit is 45 s, its warning 15 s before


def config(demo_data):
    return ["demo", "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
            "--set", f"trainer.max_epochs={EPOCHS}", "--no-wait"]


def wait_until_ended(run_dir: Path, timeout_s: float, job_id: str = "") -> list:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        found = segments.read(run_dir)
        if found and found[-1].how in ("COMPLETED", "FAILED", "TIMEOUT"):
            return found
        if job_id:
            release_requeued(job_id)
        time.sleep(2)
    log = job_logs(run_dir)
    raise AssertionError(f"{run_dir.name} did not end in {timeout_s} s: {segments.read(run_dir)}\n{log[-3000:]}")


def assert_resumed_to_the_same_result(long_dir: Path, reference: Path, found: list) -> None:
    log = job_logs(long_dir)
    # Slurm's 2-minute limit warns ~50 s in (its signal may come 60 s early), the LSF stand-in's 45 s limit 15 s before
    assert len(found) >= 3 and [s.how for s in found[:-1]] == ["REQUEUED"] * (len(found) - 1), (found, log[-3000:])
    assert found[-1].how == "COMPLETED", log[-3000:]
    resumed = [r for s in found[1:] for r in s.resumed]
    assert resumed and all(r["resumed_step"] for r in resumed), resumed  # every later segment went on from a step
    long, ref = (json.loads((d / "results.json").read_text()) for d in (long_dir, reference))
    assert long["epochs"] == ref["epochs"] == EPOCHS
    # bit-identical when every stop falls between epochs (tests/test_requeue.py); a stop mid-epoch restarts that
    # epoch's data order, so here the same result within a tolerance (measured at 16 epochs: Slurm 0.1270, 4 segments,
    # LSF 0.1324, 6 segments, against 0.1333 uninterrupted: within 5 %)
    assert abs(long["final_val_loss"] - ref["final_val_loss"]) <= max(0.1 * ref["final_val_loss"], 0.02), (long, ref)
    assert abs(long["final_val_acc"] - ref["final_val_acc"]) <= 0.05, (long, ref)
    status = run_cluster("status", long_dir)
    assert status.returncode == 0 and "segment 2:" in status.stdout and "result:" in status.stdout, status.stdout
    assert len(manifest(long_dir)["segments"]) == len(found)
    # what it trained on, in the results and (status copies it) the manifest: no GPU, no CUDA, no driver here
    assert manifest(long_dir)["gpu"] == {k: long[k] for k in ("gpu", "cuda", "driver")} == dict.fromkeys(
        ("gpu", "cuda", "driver"))
    # and how: precision auto is 32-bit on the CPU; the input wait of the last segment's rank 0
    assert manifest(long_dir)["speed"]["precision"] == long["precision"] == "32-true"
    assert f"waited for data {long['input']['wait_fraction']:.0%}" in status.stdout, status.stdout


# The Lightning example (examples/lightning_smart) with ~100 s of training under requeue_1x1's 2-minute limit.
LIGHTNING = Path(__file__).resolve().parents[1] / "examples" / "lightning_smart" / "experiment.yaml"
LIGHTNING_LONG = ["--", "python", "train.py", "--config", "configs/train/requeue_1x1.yaml"]


def own_code_saved_on_the_warning_and_resumed(run_dir: Path, found: list) -> None:
    """Your own code: the warning reached it in the container, it saved where CT_CHECKPOINT_DIR said and exited with
    CT_REQUEUE_EXIT; the job requeued and the next segment resumed from that checkpoint to the end."""
    log = job_logs(run_dir)
    assert found[0].how == "REQUEUED" and found[-1].how == "COMPLETED", (found, log[-3000:])
    assert "asking for a requeue" in log and f"resuming from {run_dir}/checkpoints/last.ckpt" in log, log[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs"] == 30 and metrics["resumed_from"] == f"{run_dir}/checkpoints/last.ckpt"


def test_runs_longer_than_their_limit_requeue_themselves_and_complete(cpu_image, slurm_cluster, demo_data,
                                                                     runs_dir, lsf_path, monkeypatch):
    """Slurm (a two-minute limit) and the LSF stand-in (a 45 s limit) side by side, after one uninterrupted run."""
    reference = run_cluster("local", "cpu_1proc", *config(demo_data), "--run-id", "reference", "--wait")
    assert reference.returncode == 0, reference.stdout[-3000:]
    monkeypatch.setenv("CT_LSF_MINUTE_SECONDS", str(LSF_MINUTE_S))
    for cluster, profile in (("ci-slurm", "requeue_1x1"), ("ci-lsf", "requeue_1host")):
        done = run_cluster(cluster, profile, *config(demo_data), "--run-id", cluster)
        assert done.returncode == 0, done.stderr
    own = run_cluster("ci-slurm", "requeue_1x1", LIGHTNING, "--run-id", "own-code", "--no-wait", *LIGHTNING_LONG)
    assert own.returncode == 0, own.stderr  # your own code beside them (below: test_own_code_...)
    slurm_job, lsf_job, own_job = (manifest(runs_dir / c)["scheduler"]["job_id"] for c in ("ci-slurm", "ci-lsf",
                                                                                         "own-code"))
    try:
        for cluster in ("ci-slurm", "ci-lsf"):
            found = wait_until_ended(runs_dir / cluster, 900, slurm_job if cluster == "ci-slurm" else "")
            assert_resumed_to_the_same_result(runs_dir / cluster, runs_dir / "reference", found)
        own_code_saved_on_the_warning_and_resumed(runs_dir / "own-code", wait_until_ended(runs_dir / "own-code", 900,
                                                                                          own_job))
    finally:  # a failed test leaves no job requeueing itself behind
        subprocess.run(["scancel", slurm_job, own_job], capture_output=True)
        subprocess.run(["bkill", lsf_job], capture_output=True)
    assert {s.job_id for s in segments.read(runs_dir / "ci-slurm")} == {slurm_job}  # a requeued job keeps its id
    log = (runs_dir / "ci-slurm" / "logs" / f"job-{slurm_job}.out").read_text()
    assert re.search(r"stop requested \(SIGUSR1\): saved .* at step \d+", log), log[-3000:]
    bhist = subprocess.run(["bhist", "-l", lsf_job], capture_output=True, text=True)
    assert "requeued" in bhist.stdout.lower(), bhist.stdout
