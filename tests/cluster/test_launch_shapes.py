"""Every launch shape really runs, at reduced scale, inside the image: Slurm independent packing and the
first-to-start race on the real test Slurm cluster; LSF single host and 2 hosts through the LSF stand-in."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import manifest, run_cluster, wait_for_slurm_job

pytestmark = [pytest.mark.image, pytest.mark.slurm]
SMALL = ["--set", "trainer.max_epochs=2", "--set", "data.num_workers=0", "--set", "trainer.limit_train_batches=10",
         "--set", "trainer.limit_val_batches=4"]


def test_independent_tasks_pack_one_per_gpu(cpu_image, slurm_cluster, demo_data, runs_dir):
    """Four 1-CPU tasks on one node (seed 001's shape): each its own model and directory, and each rank computes on
    one thread (issue 24: with PyTorch's default every rank would run a thread per core of the node)."""
    # batches of 32 (the demo's are 64): epochs of 32 steps, long enough for the four tasks to be counted side by side
    done = run_cluster("ci-slurm", "pack_4x1", "demo", "--set", f"data.root={demo_data}", *SMALL,
                       "--set", "trainer.limit_train_batches=60", "--set", "data.batch_size=32", "--run-id", "pack",
                       "--no-wait")
    assert done.returncode == 0, done.stderr
    run_dir = runs_dir / "pack"
    names = ["task-0-resnet-w4", "task-1-resnet-w6", "task-2-resnet-w8", "task-3-resnet-d14"]
    training = wait_for_log(run_dir, [rf"^\[{name}\] .*rank 0/1 on host n1 .*fit\)" for name in names])
    threads = most_busy_threads(run_dir) if training else None
    state = wait_for_slurm_job(manifest(run_dir)["scheduler"]["job_id"])
    log = "".join(p.read_text() for p in (run_dir / "logs").glob("job-*.out"))
    assert state == "COMPLETED", log[-4000:]
    assert threads == 4, (threads, log[-3000:])  # counted from /proc while all four trained
    for name in names:
        assert re.search(rf"^\[{name}\] .*rank 0/1 on host n1", log, re.M), name  # its own prefix
        results = json.loads((run_dir / name / "results.json").read_text())  # its own run directory
        assert results["world_size"] == 1 and results["final_val_loss"] < results["initial_val_loss"]
    # four different models trained: each task's own checkpoint holds its own architecture (width 4, 6, 8; depth 14)
    sizes = [parameters(run_dir / n / "checkpoints" / "last.ckpt") for n in names]
    assert sizes[0] < sizes[1] < sizes[2] and sizes[0] < sizes[3], dict(zip(names, sizes))


def most_busy_threads(run_dir, samples: int = 16, expected: int = 4) -> int:
    """The most compute threads seen in up to `samples` windows: a task pauses now and then (validation, a checkpoint,
    a late start on a loaded machine), so one window may miss it; more than `expected` in any window is the bug."""
    most = 0
    for _ in range(samples):
        most = max(most, busy_threads(run_dir, window_s=1.5))
        if most >= expected:
            break
    return most


def wait_for_log(run_dir, patterns, timeout_s=300) -> bool:
    """Until every pattern is in the job's log (True), or the job's log stops growing for good (False)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        log = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("job-*.out"))
        if all(re.search(pattern, log, re.M) for pattern in patterns):
            return True
        time.sleep(0.5)
    return False


def busy_threads(run_dir, window_s=3.0, share=0.1) -> int:
    """Threads of the run's training processes (found by their CT_RUN_DIR) that computed at least `share` of a CPU
    over the window: the compute threads, whatever else (logging, Python) a process holds."""
    pids = [pid for pid in os.listdir("/proc") if pid.isdigit() and _trains_in(pid, run_dir)]
    before = _thread_ticks(pids)
    time.sleep(window_s)
    after = _thread_ticks(pids)
    enough = share * window_s * os.sysconf("SC_CLK_TCK")
    return sum(1 for tid, ticks in after.items() if ticks - before.get(tid, ticks) >= enough)


def _trains_in(pid, run_dir) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"train\0fit\0" in cmdline and f"CT_RUN_DIR={Path(run_dir).resolve()}".encode() in environ


def _thread_ticks(pids) -> dict:
    """(pid, tid) -> user + system clock ticks so far."""
    ticks = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            ticks[(pid, task.name)] = int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14, 15)
    return ticks


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
def test_lsf_shapes_through_the_standin(cpu_image, cluster_nodes, demo_data, runs_dir, lsf_path, profile, hosts):
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
