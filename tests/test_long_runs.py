"""Runs longer than one allocation, on the real test Slurm cluster and through the LSF stand-in, inside the image:
each segment is warned, every rank saves, the job requeues itself, and the run finishes on its own with the same
metrics.csv and weights, bit for bit, as an uninterrupted run of the same config and shape (one rank and two DDP
ranks; the stops fall mid-epoch).

The test asks for the segments it proves, whatever the machine's speed: it sends each job the scheduler's own warning
(`scancel --batch --signal=USR1`, `bkill -s USR1`: what `--signal=B:USR1@N` and `-wa USR1` deliver) once the
segment has trained an epoch, twice, and then lets the run finish. That the time limit itself sends the warning is
proven by tests/test_slurm_requeue.py and tests/test_lsf_requeue.py, and here by your own code below, which runs under
a real two-minute limit."""
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import assert_same_tensors, job_logs, manifest, release_requeued, run_cluster

from train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
EPOCHS = 4
REQUEUES = 2  # the segments proven: two requeues, then the end
ENDED = ("COMPLETED", "FAILED", "TIMEOUT")
WARN = {"slurm": ["scancel", "--batch", "--signal=USR1"], "lsf": ["bkill", "-s", "USR1"]}


def config(demo_data, strategy):
    return ["demo", "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
            "--set", f"trainer.max_epochs={EPOCHS}", "--set", f"trainer.strategy={strategy}", "--no-wait"]


def epochs_logged(run_dir: Path) -> int:
    return len(re.findall(r"\[cluster-train\] epoch \d+/", job_logs(run_dir)))


def warned_until_ended(runs: dict, timeout_s: float) -> dict:
    """runs: name -> (run directory, scheduler, job id, requeues to ask for). Each run's segments once it ended."""
    warned = {name: [] for name in runs}  # epochs logged when each warning was sent
    ended = {}
    deadline = time.time() + timeout_s
    while len(ended) < len(runs) and time.time() < deadline:
        for name, (run_dir, scheduler, job_id, requeues) in runs.items():
            found = segments.read(run_dir)
            if name in ended or not found:
                continue
            if found[-1].how in ENDED:
                ended[name] = found
            elif scheduler == "slurm":
                release_requeued(job_id)
            trained = epochs_logged(run_dir)
            if (len(warned[name]) < requeues and len(found) == len(warned[name]) + 1 and not found[-1].how
                    and trained > (warned[name] or [0])[-1]):  # this segment trained an epoch: warn it, once
                subprocess.run([*WARN[scheduler], job_id], capture_output=True)
                warned[name].append(trained)
        time.sleep(0.5)
    missing = {name: segments.read(runs[name][0]) for name in runs if name not in ended}
    assert not missing, f"not ended in {timeout_s} s: {missing}\n" + "".join(job_logs(r[0])[-2000:] for r in runs.values())
    return ended


def assert_resumed_to_the_same_result(long_dir: Path, reference: Path, found: list) -> None:
    log = job_logs(long_dir)
    assert len(found) >= 3 and [s.how for s in found[:-1]] == ["REQUEUED"] * (len(found) - 1), (found, log[-3000:])
    assert found[-1].how == "COMPLETED", log[-3000:]
    resumed = [r for s in found[1:] for r in s.resumed]
    assert resumed and all(r["resumed_step"] for r in resumed), resumed  # every later segment went on from a step
    per_epoch = int(re.search(r"\[cluster-train\] epoch 1/\d+ step (\d+)", log).group(1))
    stops = [int(step) for step in re.findall(r"stop requested \(\S+\): saved .* at step (\d+)", log)]
    assert len(stops) >= REQUEUES and all(step % per_epoch for step in stops), (stops, per_epoch)  # mid-epoch
    long, ref = (json.loads((d / "results.json").read_text()) for d in (long_dir, reference))
    assert long["epochs"] == ref["epochs"] == EPOCHS
    assert (long_dir / "metrics.csv").read_text() == (reference / "metrics.csv").read_text()
    for name in ("models/resnet_cifar_best_weights.pth", "checkpoints/last.ckpt"):
        assert_same_tensors(long_dir / name, reference / name)
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


def test_runs_longer_than_one_allocation_requeue_themselves_and_complete(cpu_image, slurm_cluster, demo_data,
                                                                        runs_dir, lsf_path):
    """Slurm (one rank and two DDP ranks) and the LSF stand-in warned twice each, your own code under a real
    two-minute limit, and the uninterrupted references on the same shapes, all side by side."""
    submitted = {}
    for name, cluster, profile, args in (("reference", "ci-slurm", "n1_gpu1", config(demo_data, "single")),
                                         ("reference-ddp", "ci-slurm", "n1_gpu2", config(demo_data, "ddp")),
                                         ("ci-slurm", "ci-slurm", "n1_gpu1", config(demo_data, "single")),
                                         ("ci-slurm-ddp", "ci-slurm", "n1_gpu2", config(demo_data, "ddp")),
                                         ("ci-lsf", "ci-lsf", "one_gpu", config(demo_data, "single")),
                                         ("own-code", "ci-slurm", "requeue_1x1", [LIGHTNING, "--no-wait"])):
        done = run_cluster(cluster, profile, *args, "--run-id", name, *(LIGHTNING_LONG * (name == "own-code")))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        submitted[name] = manifest(runs_dir / name)["scheduler"]
    runs = {name: (runs_dir / name, job["name"], job["job_id"], REQUEUES if name.startswith("ci-") else 0)
            for name, job in submitted.items()}
    try:
        found = warned_until_ended(runs, 900)
    finally:  # a failed test leaves no job requeueing itself behind
        subprocess.run(["scancel", *(job["job_id"] for job in submitted.values() if job["name"] == "slurm")],
                       capture_output=True)
        subprocess.run(["bkill", submitted["ci-lsf"]["job_id"]], capture_output=True)
    for name, reference in (("ci-slurm", "reference"), ("ci-slurm-ddp", "reference-ddp"), ("ci-lsf", "reference")):
        assert len(found[name]) == REQUEUES + 1, found[name]
        assert_resumed_to_the_same_result(runs_dir / name, runs_dir / reference, found[name])
    own_code_saved_on_the_warning_and_resumed(runs_dir / "own-code", found["own-code"])
    slurm_job, lsf_job = submitted["ci-slurm"]["job_id"], submitted["ci-lsf"]["job_id"]
    assert {s.job_id for s in found["ci-slurm"]} == {slurm_job}  # a requeued job keeps its id
    log = (runs_dir / "ci-slurm" / "logs" / f"job-{slurm_job}.out").read_text()
    assert re.search(r"stop requested \(SIGUSR1\): saved .* at step \d+", log), log[-3000:]
    bhist = subprocess.run(["bhist", "-l", lsf_job], capture_output=True, text=True)
    assert bhist.stdout.lower().count("requeued") >= REQUEUES, bhist.stdout
