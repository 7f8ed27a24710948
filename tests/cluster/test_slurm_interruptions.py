"""Interruptions of real training runs on the test Slurm cluster, inside the image: a run preempted by a job of the
higher-priority partition `ci-high` saves, is requeued by Slurm and completes without retraining what it had
finished; a rank killed in a 2-node run ends the whole job at once (srun --kill-on-bad-exit) and `status` names it;
a run that fills its disk still records how it ended (FAILED, exit 4) and `status` names the full disk; a node that
fails under a 2-node run is recorded and named, and left out of the job Slurm requeues; a time-limit warning after
the results line leaves the run COMPLETED."""
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, job_logs, manifest, run_cluster, stop_sh_run, wait_for_run

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]


def common(demo_data, epochs: int, *more: str) -> list:
    return ["demo", "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
            "--set", f"trainer.max_epochs={epochs}", *more, "--no-wait"]


def epochs_done(run_dir: Path) -> int:
    return len(re.findall(r"\[cluster-train\] epoch \d+/", job_logs(run_dir)))


def test_a_preempted_run_is_requeued_and_completes_without_retraining(cpu_image, slurm_cluster, demo_data, runs_dir):
    done = run_cluster("ci-slurm", "n1_gpu1", *common(demo_data, 8), "--run-id", "low")
    assert done.returncode == 0, done.stderr
    run_dir = runs_dir / "low"
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    try:
        wait_for_run(lambda: epochs_done(run_dir) >= 2, "two epochs trained", 300, run_dir)
        node = segments.read(run_dir)[0].hosts
        high = subprocess.run(["sbatch", "--parsable", "-p", "ci-high", "-w", node, "--exclusive", "--time=2",
                               "-o", os.devnull, "--wrap", "sleep 2"], capture_output=True, text=True)
        assert high.returncode == 0, high.stderr
        found = wait_for_run(lambda: [s for s in segments.read(run_dir) if s.how == "COMPLETED"] and
                             segments.read(run_dir), "the preempted run completed", 600, run_dir, job_id)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    log = job_logs(run_dir)
    assert [s.how for s in found] == ["PREEMPTED", "COMPLETED"], (found, log[-3000:])
    assert re.search(r"stop requested \(SIGTERM\): saved .* at step \d+ \(epoch (\d+)\)", log), log[-3000:]
    resumed = found[1].resumed[0]
    assert resumed["resumed_epoch"] >= 2 and resumed["resumed_step"] > 0, resumed  # finished epochs not retrained
    assert len(re.findall(r"\[cluster-train\] epoch \d+/8", log)) <= 8 + 1  # at most the interrupted one again
    status = run_cluster("status", run_dir)
    assert "PREEMPTED" in status.stdout and "COMPLETED" in status.stdout, status.stdout


def rank_process(job_id: str, rank: str) -> int:
    """The pid of the training process of this job's rank (inside the container, seen from here)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                       .split("\0") if "=" in v)
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (env.get("SLURM_JOB_ID") == job_id and env.get("SLURM_PROCID") == rank and b"-m" in cmd
                and b"train" in cmd and cmd[0].endswith(b"python")):
            return int(pid)
    return 0


def csv_steps(run_dir: Path, epoch: int = -1) -> list:
    """The steps of metrics.csv's training rows (of one epoch, counted from 0, or all)."""
    import csv

    if not (run_dir / "metrics.csv").is_file():
        return []
    with (run_dir / "metrics.csv").open() as f:
        return [int(row["step"]) for row in csv.DictReader(f)
                if row.get("train/loss") and epoch in (-1, int(row["epoch"]))]


def hostnames(nodes: str) -> list:
    """Slurm's n[1-2] as ['n1', 'n2'], in the order the ranks are placed."""
    return subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True).stdout.split()


def test_a_rank_killed_in_a_two_node_run_ends_the_job_and_status_names_it(cpu_image, slurm_cluster, demo_data,
                                                                         runs_dir, tmp_path):
    """A rank killed ends the job at once and `status` names it; resumed, the run logs each step once: the steps
    rank 0 logged after its last checkpoint (epoch 1's end) are trained again, not written twice. (max_failures 0:
    no requeue after the failure, which tests/cluster/test_hangs.py proves.)"""
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["profiles"]["n2_gpu1"]["max_failures"] = 0
    (tmp_path / "ci-slurm.yaml").write_text(yaml.safe_dump(cluster))
    done = run_cluster(tmp_path / "ci-slurm.yaml", "n2_gpu1", *common(demo_data, 50, "--set", "trainer.strategy=ddp",
                                                      "--set", "trainer.log_every_n_steps=4"), "--run-id", "ranks")
    assert done.returncode == 0, done.stderr
    run_dir = runs_dir / "ranks"
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    try:
        wait_for_run(lambda: csv_steps(run_dir, epoch=1), "a row of epoch 2 written", 300, run_dir)
        pid = rank_process(job_id, "1")
        assert pid, "rank 1's training process not found"
        os.kill(pid, 9)
        killed = time.time()
        found = wait_for_run(lambda: segments.read(run_dir)[-1].how and segments.read(run_dir), "the job ended", 120,
                             run_dir)
        ended_after = time.time() - killed
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    print(f"rank 1 killed: the job ended {ended_after:.1f} s later")
    assert found[-1].how == "FAILED" and ended_after < 60, (found, ended_after)
    assert found[-1].died == {"rank": 1, "host": hostnames(found[-1].hosts)[1]}, found  # srun's words, recorded
    status = run_cluster("status", run_dir)
    assert re.search(r"rank 1 died on host n\d", status.stdout), status.stdout
    resumed = run_cluster("resume", run_dir, "--set", "trainer.max_epochs=2", "--wait")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr
    steps = csv_steps(run_dir)
    assert steps == sorted(set(steps)) and csv_steps(run_dir, epoch=1), steps  # each step once, epoch 2 trained


@pytest.fixture
def small_runs_dir(tmp_path, monkeypatch):
    """A runs directory on a 400 KiB tmpfs: room for a run's files and one checkpoint (217 KB), not two."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mnt)], check=True)
    monkeypatch.setenv("CT_RUNS_DIR", str(mnt))
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_run_that_fills_its_disk_ends_failed_and_status_says_why(cpu_image, slurm_cluster, demo_data,
                                                                   small_runs_dir):
    done = run_cluster("ci-slurm", "n1_gpu1", *common(demo_data, 3), "--run-id", "full")
    assert done.returncode == 0, done.stderr
    run_dir = small_runs_dir / "full"
    found = wait_for_run(lambda: segments.read(run_dir) and segments.read(run_dir)[-1].how and segments.read(run_dir),
                         "the job ended", 300, run_dir)
    assert (found[-1].how, found[-1].exit_code) == ("FAILED", 4), (found, job_logs(run_dir)[-3000:])  # DISK_FULL
    status = run_cluster("status", run_dir)
    assert "FAILED" in status.stdout and "disk full" in status.stdout, status.stdout


def test_a_warning_after_the_results_line_leaves_the_run_completed_and_resume_refused(cpu_image, slurm_cluster,
                                                                                         demo_data, runs_dir):
    """The time-limit warning sent once the training has written its results, and again until the job ends (one of
    them lands while the ranks exit): the run ends COMPLETED, not requeued to validate and log its last row again;
    and `resume` of the completed run is refused in one line that says how to train longer."""
    done = run_cluster("ci-slurm", "n1_gpu1", *common(demo_data, 1), "--run-id", "late")
    assert done.returncode == 0, done.stderr
    run_dir = runs_dir / "late"
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    try:
        wait_for_run(lambda: "[cluster-train] results:" in job_logs(run_dir), "the results line", 300, run_dir)
        deadline = time.time() + 60
        while not segments.read(run_dir)[-1].how and time.time() < deadline:
            subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], capture_output=True)
            time.sleep(0.1)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    found, metrics = segments.read(run_dir), (run_dir / "metrics.csv").read_text()
    assert [(s.how, s.exit_code) for s in found] == [("COMPLETED", 0)], (found, job_logs(run_dir)[-3000:])
    refused = run_cluster("resume", run_dir)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "is COMPLETED" in refused.stderr and "--set trainer.max_epochs=2" in refused.stderr, refused.stderr
    assert len(segments.read(run_dir)) == 1 and (run_dir / "metrics.csv").read_text() == metrics


def back_in_service(node: str) -> None:
    """ReturnToService=2 brings a downed node back at once (shared/notes item 14); where it did not, resume it."""
    state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True).stdout
    if "down" in state or "drain" in state:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)


def test_a_node_failed_under_a_two_node_run_is_named_and_left_out_of_the_requeue(cpu_image, slurm_cluster, tmp_path,
                                                                                  runs_dir):
    """The second node of a running 2-node job set DOWN: Slurm cancels the job DUE TO NODE FAILURE and requeues it
    (its srun may exit 0). The segment ends NODE_FAIL naming that node alone (sacct's NodeList holds all the job's),
    and the requeued job runs without it, though it is back in service by then; `status` says it was left out.
    (--exclusive: no other test's job shares the node this one downs.)"""
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["profiles"]["n2_gpu1"]["exclusive"] = True
    (tmp_path / "ci-slurm.yaml").write_text(yaml.safe_dump(cluster))
    run_dir, job_id = stop_sh_run(tmp_path / "ci-slurm.yaml", "n2_gpu1", "nodefail", tmp_path, runs_dir)
    node = ""
    try:
        wait_for_run(lambda: job_logs(run_dir).count("[test] segment 1 running") == 2, "both ranks run", 180, run_dir)
        node = hostnames(segments.read(run_dir)[0].hosts)[-1]  # not the batch host: its shell records the failure
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=ct-test-node-failure"],
                       check=True)
        found = wait_for_run(lambda: segments.read(run_dir)[0].how and segments.read(run_dir), "segment 1 ended", 60,
                             run_dir)
        back_in_service(node)  # as an admin would: only the job's exclusion keeps the requeue off it now
        found = wait_for_run(lambda: len(segments.read(run_dir)) > 1 and segments.read(run_dir), "the requeued job",
                             180, run_dir, job_id)
        job = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
        if node:
            back_in_service(node)
    log = job_logs(run_dir)
    assert found[0].how == "NODE_FAIL", (found, log[-2000:])
    assert node not in hostnames(found[1].hosts) and f" ExcNodeList={node} " in job, (found, job, log[-2000:])
    assert found[0].failed_nodes == [node], found[0]
    status = run_cluster("status", run_dir)
    assert re.search(rf"NODE_FAIL( \(exit \d+\))?: a node failed \({node}\)", status.stdout), status.stdout
    assert re.search(rf"^  excluded: {node} \(", status.stdout, re.M), status.stdout
