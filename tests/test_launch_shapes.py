"""Every launch shape really runs, at reduced scale, inside the image: Slurm independent packing and the
first-to-start race on the real test Slurm cluster; LSF single host and 2 hosts through the LSF stand-in."""
import json
import re
import subprocess

import pytest

from conftest import manifest, run_cluster, wait_for_slurm_job

pytestmark = [pytest.mark.image, pytest.mark.slurm]
SMALL = ["--set", "trainer.max_epochs=2", "--set", "data.num_workers=0", "--set", "trainer.limit_train_batches=10",
         "--set", "trainer.limit_val_batches=4"]


def test_independent_tasks_pack_one_per_gpu(cpu_image, slurm_cluster, demo_data, runs_dir):
    done = run_cluster("ci-slurm", "pack_4x1", "demo", "--set", f"data.root={demo_data}", *SMALL, "--run-id", "pack",
                       "--no-wait")
    assert done.returncode == 0, done.stderr
    run_dir = runs_dir / "pack"
    state = wait_for_slurm_job(manifest(run_dir)["scheduler"]["job_id"])
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("job-*.out"))
    assert state == "COMPLETED", log[-4000:]
    names = ["task-0-resnet-w4", "task-1-resnet-w6", "task-2-resnet-w8", "task-3-resnet-d14"]
    for name in names:
        assert re.search(rf"^\[{name}\] .*rank 0/1 on host n1", log, re.M), name  # its own prefix
        results = json.loads((run_dir / name / "results.json").read_text())  # its own run directory
        assert results["world_size"] == 1 and results["final_val_loss"] < results["initial_val_loss"]
    # four different models trained: each task's own checkpoint holds its own architecture (width 4, 6, 8; depth 14)
    sizes = [parameters(run_dir / n / "checkpoints" / "last.ckpt") for n in names]
    assert sizes[0] < sizes[1] < sizes[2] and sizes[0] < sizes[3], dict(zip(names, sizes))


def parameters(checkpoint) -> int:
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    return sum(t.numel() for t in state.values() if t.is_floating_point())


def test_first_to_start_keeps_the_job_that_starts(cpu_image, slurm_cluster, demo_data, runs_dir):
    done = run_cluster("ci-slurm", "--first-to-start", "n1_gpu1_later", "n1_gpu1", "demo",
                       "--set", f"data.root={demo_data}", *SMALL, "--timeout", "120")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "n1_gpu1 started first" in done.stdout
    by_profile = {manifest(d)["profile"]: d for d in runs_dir.iterdir()}
    won, lost = manifest(by_profile["n1_gpu1"]), manifest(by_profile["n1_gpu1_later"])
    assert won["first_to_start"]["won"] and not lost["first_to_start"]["won"]
    assert wait_for_slurm_job(lost["scheduler"]["job_id"], 30) == "CANCELLED"
    assert wait_for_slurm_job(won["scheduler"]["job_id"]) == "COMPLETED"


@pytest.mark.parametrize("profile, hosts", [("single_host_2gpu", {"n1"}), ("two_hosts", {"n1", "n2"})])
def test_lsf_shapes_through_the_standin(cpu_image, slurm_cluster, demo_data, runs_dir, lsf_path, profile, hosts):
    done = run_cluster("ci-lsf", profile, "demo", "--set", f"data.root={demo_data}", *SMALL, "--run-id", profile,
                       "--wait", "--timeout", "600")
    run_dir = runs_dir / profile
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("demo_*.out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr + log[-3000:]
    assert set(re.findall(r"rank \d+/2 on host (\S+)", log)) == hosts, log[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["world_size"] == 2 and results["final_val_loss"] < results["initial_val_loss"]
    assert subprocess.run(["bjobs", "-noheader", "-o", "stat", manifest(run_dir)["scheduler"]["job_id"]],
                          capture_output=True, text=True).stdout.split()[0] == "DONE"
