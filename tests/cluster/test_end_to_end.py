"""The whole path on real components: the built CPU image, bin/run-cluster, the real test Slurm cluster."""
import json
import re
import subprocess
import time

import pytest

from conftest import manifest, only_run, run_cluster, sha256, wait_for_slurm_job

SMALL = ["--set", "trainer.max_epochs=2", "--set", "data.num_workers=0", "--set", "trainer.limit_train_batches=10"]


def data_args(demo_data):
    return ["--set", f"data.root={demo_data}"]


def assert_trained(run_dir, world_size):
    results = json.loads((run_dir / "results.json").read_text())
    assert results["world_size"] == world_size
    assert results["final_val_loss"] < results["initial_val_loss"], results
    for name in ("metrics.csv", "config.yaml", "job.sh", "checkpoints/last.ckpt", "checkpoints/best.ckpt"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    return results


def assert_manifest_names_the_image_that_ran(run_dir, results):
    recorded = manifest(run_dir)["image"]
    assert recorded["sha256"] == sha256(recorded["path"])  # equal to sha256sum of the SIF that ran
    assert results["image_sha256"] == recorded["sha256"]  # ... and the job saw the same digest inside


@pytest.mark.image
def test_rerun_uses_the_same_image_digest_and_config(cpu_image, demo_data, runs_dir):
    done = run_cluster("local", "cpu_1proc", "demo", *data_args(demo_data), "--set", "trainer.max_epochs=1")
    assert done.returncode == 0, done.stderr
    first = only_run(runs_dir)
    memory = json.loads((first / "results.json").read_text())["host_memory"]  # demo: 1 worker per rank
    assert memory["ranks"][0]["workers_seen"] >= 1 and 0 < memory["worker_peak_gb"] < memory["rank_peak_gb"], memory
    again = run_cluster("--rerun", first, "--run-id", "again")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert f"GB per worker measured in run {first.name} (" in again.stdout  # its preflight budgets what the first took
    second = runs_dir / "again"
    a, b = manifest(first), manifest(second)
    assert b["image"]["sha256"] == a["image"]["sha256"] and b["rerun_of"] == a["run_id"]
    strip = lambda c: {**c, "output_dir": None}  # noqa: E731
    assert strip(b["config"]) == strip(a["config"])


@pytest.mark.image
def test_probe_data_measures_the_workers_before_the_first_run_and_preflight_budgets_them(cpu_image, demo_data,
                                                                                       runs_dir):
    done = run_cluster("probe-data", "demo", *data_args(demo_data), "--set", "data.num_workers=2", "--batches", "4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("probe-data demo: 2 workers x batch 64, 4 batches: ") and done.stdout.count("\n") == 1
    (entry,) = json.loads((runs_dir / "probes" / "demo.json").read_text()).values()
    assert entry["workers_seen"] == 2 and 0 < entry["worker_peak_gb"] < 2 and entry["image_sha256"] == cpu_image.sha256
    dry = run_cluster("local", "cpu_2proc", "demo", *data_args(demo_data), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"GB per worker measured in probe-data {runs_dir / 'probes' / 'demo.json'} (" in dry.stdout
    assert "GB per rank as stated" in dry.stdout  # a probe builds no model: the rank's own figure needs a run


@pytest.mark.image
@pytest.mark.slurm
def test_two_node_slurm_job_trains_across_nodes(cpu_image, slurm_cluster, demo_data, runs_dir):
    done = run_cluster("ci-slurm", "n2_gpu1", "demo", *data_args(demo_data), *SMALL, "--no-wait")
    assert done.returncode == 0, done.stderr
    run_dir = only_run(runs_dir)
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    state = wait_for_slurm_job(job_id)
    log = "\n".join(p.read_text() for p in (run_dir / "logs").glob("job-*.out"))
    assert state == "COMPLETED", log[-4000:]
    hosts = set(re.findall(r"rank \d+/2 on host (\S+)", log))
    assert hosts == {"n1", "n2"}, log[-4000:]
    results = assert_trained(run_dir, world_size=2)
    assert sorted(results["hostnames"]) == ["n1", "n2"]
    assert_manifest_names_the_image_that_ran(run_dir, results)


@pytest.mark.image
@pytest.mark.slurm
def test_dry_run_submits_nothing_and_renders_the_real_script(cpu_image, slurm_cluster, demo_data, runs_dir):
    args = ["ci-slurm", "n1_gpu2", "demo", *data_args(demo_data), "--set", "trainer.max_epochs=1", "--run-id", "same"]
    queue = lambda: subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout  # noqa: E731
    before = queue()
    dry = run_cluster(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert queue() == before  # nothing was queued
    assert not (runs_dir / "same").exists()
    real = run_cluster(*args, "--no-wait")
    assert real.returncode == 0, real.stderr
    job_id = manifest(runs_dir / "same")["scheduler"]["job_id"]
    assert dry.stdout.split("nothing submitted) ---\n", 1)[1] == (runs_dir / "same" / "job.sh").read_text()
    assert job_id in queue().split()  # the script it showed is the one queued (this shape trains in test_scaling.py)
    subprocess.run(["scancel", job_id], check=True)


@pytest.mark.image
def test_status_logs_and_cancel_a_run(cpu_image, demo_data, runs_dir):
    done = run_cluster("local", "cpu_1proc", "demo", *data_args(demo_data), "--set", "trainer.max_epochs=50",
                       "--run-id", "long", "--no-wait")
    assert done.returncode == 0, done.stderr
    run_dir = runs_dir / "long"
    assert "RUNNING" in run_cluster("status", run_dir).stdout
    deadline = time.time() + 120
    while "rank 0/1 on host" not in run_cluster("logs", run_dir).stdout:  # logs prints the job's log so far
        assert time.time() < deadline, run_cluster("logs", run_dir).stdout
        time.sleep(1)
    assert "cancelled local job" in run_cluster("cancel", run_dir).stdout
    assert "CANCELLED" in run_cluster("status", run_dir).stdout
    bad = run_cluster("status", runs_dir / "nope")
    assert bad.returncode == 2 and "has no manifest.json" in bad.stderr
