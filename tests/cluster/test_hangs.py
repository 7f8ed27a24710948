"""Issue 43 on the real test Slurm cluster and the LSF stand-in, inside the image: a rank stopped with SIGSTOP in a
2-node DDP run is found by the batch shell's watchdog within hang_timeout + 60 s, named with its host, its stacks
saved; the job is requeued without that node, resumes and ends with the metrics of an uninterrupted run. A run whose
rank is killed at each of its starts is requeued twice (max_failures 2) and then ends FAILED. On the LSF stand-in the
watchdog ends a hung single-host run and names it, and a host failed under a 2-host run is named and left out of the
job LSF reruns."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, job_logs, manifest, run_cluster, stop_sh_run, wait_for_run

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
HANG_S = 20
DEMO = ["demo", "--set", "data.num_workers=0", "--set", "trainer.max_epochs=3", "--set", "trainer.strategy=ddp"]


def with_hang_timeout(tmp_path: Path, cluster: str, profile: str) -> Path:
    """The cluster file with hang_timeout HANG_S on `profile` (a profile key: --set does not reach it)."""
    found = yaml.safe_load((ROOT / "clusters" / f"{cluster}.yaml").read_text())
    found["profiles"][profile]["hang_timeout"] = f"{HANG_S}s"
    path = tmp_path / f"{cluster}-hang.yaml"
    path.write_text(yaml.safe_dump(found))
    return path


def read_ends(run_dir: Path) -> list:
    path = run_dir / "logs" / "segments.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines if '"event": "end"' in line]


def progress(run_dir: Path, rank: int) -> list:
    """Rank `rank`'s heartbeat line: STEP PROGRESS_TIME ALIVE_TIME STEP_S HOST PID ([] before the first)."""
    path = run_dir / "logs" / "progress" / f"rank-{rank}"
    return path.read_text().split() if path.is_file() else []


def stop_rank_after_an_epoch(run_dir: Path, rank: int) -> tuple:
    """SIGSTOP rank `rank` once an epoch has ended (a checkpoint to resume from); its (host, pid, when)."""
    wait_for_run(lambda: "[cluster-train] epoch 1/" in job_logs(run_dir) and len(progress(run_dir, rank)) == 6,
                 "an epoch trained", 300, run_dir)
    _, _, _, _, host, pid = progress(run_dir, rank)
    os.kill(int(pid), signal.SIGSTOP)  # Apptainer shares the host's PID namespace: the pid is this machine's
    return host, int(pid), time.time()


def test_a_stopped_rank_is_named_its_node_left_out_and_the_run_completes_as_uninterrupted(
        cpu_image, slurm_cluster, demo_data, runs_dir, tmp_path):
    data = ["--set", f"data.root={demo_data}"]
    done = run_cluster(with_hang_timeout(tmp_path, "ci-slurm", "n2_gpu1"), "n2_gpu1", *DEMO, *data,
                       "--run-id", "hung", "--no-wait")
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = runs_dir / "hung"
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    pid = 0
    try:
        host, pid, stopped = stop_rank_after_an_epoch(run_dir, 1)
        # the reference trains on the two other nodes while the hung job waits for its watchdog
        reference = run_cluster("ci-slurm", "n2_gpu1", *DEMO, *data, "--run-id", "reference", "--no-wait")
        assert reference.returncode == 0, reference.stderr
        (end,) = wait_for_run(lambda: read_ends(run_dir), "the hung job ended", HANG_S + 60, run_dir)
        ended_after = time.time() - stopped
        excluded = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
        found = wait_for_run(lambda: segments.read(run_dir)[-1].how == "COMPLETED" and segments.read(run_dir),
                             "the requeued job completed", 600, run_dir, job_id)
        ref_dir = runs_dir / "reference"
        wait_for_run(lambda: (ref_dir / "results.json").is_file(), "the reference completed", 300, ref_dir)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
        if pid:
            subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    print(f"rank 1 stopped: the job ended {ended_after:.1f} s later (hang_timeout {HANG_S} s)")
    log = job_logs(run_dir)
    assert ended_after < HANG_S + 60, ended_after
    assert f"error: rank 1 on host {host} made no step for" in log and f"(hang_timeout {HANG_S} s)" in log, log[-3000:]
    assert end["how"] == "HANG" and end["stuck"]["rank"] == 1 and end["stuck"]["host"] == host, end
    assert (end["requeued"], end["failures"], end["max_failures"]) == (True, 1, 2), end
    assert end["excluded"][0]["host"] == host and end["stacks"] == "logs/hang-1", end
    stacks = run_dir / "logs" / "hang-1"
    assert "Current thread" in (stacks / "rank-0-stacks.txt").read_text()  # rank 0 answered the dump request
    assert "train" in (stacks / "rank-1.stack").read_text()  # the stopped rank's last stack, from its last beat
    assert f"ExcNodeList={host} " in excluded, excluded
    assert host not in found[-1].hosts, found  # the requeued job ran without the node
    assert (run_dir / "metrics.csv").read_text() == (runs_dir / "reference" / "metrics.csv").read_text()
    shown = run_cluster("status", str(run_dir)).stdout  # what a user sees of it
    assert f"HANG: rank 1 on host {host} made no step for" in shown and "stacks in logs/hang-1" in shown, shown
    assert f"failure 1 of at most 2, requeued without {host}" in shown and f"excluded: {host} (rank 1" in shown, shown


KILLED_SH = 'echo "[test] rank $RANK: start of segment $CT_SEGMENT"\n[ "$RANK" != 1 ] || kill -9 $$\nsleep 60\n'


def test_a_rank_killed_at_every_start_is_requeued_twice_then_fails(cpu_image, slurm_cluster, runs_dir, tmp_path):
    """Rank 1 of a 2-node run killed at each start: srun ends rank 0, each end names rank 1 and its host (srun's
    words), and `status` shows them under every segment while the job is requeued and once the run has failed."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "killed.sh").write_text(KILLED_SH)
    done = run_cluster("ci-slurm", "n2_gpu1", "--run-id", "killed", "--no-wait", "--stale-image-ok", "--",
                       "bash", "killed.sh", cwd=code)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = runs_dir / "killed"
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    try:
        wait_for_run(lambda: read_ends(run_dir), "the first start ended", 120, run_dir)
        requeued = run_cluster("status", run_dir).stdout
        ends = wait_for_run(lambda: len(read_ends(run_dir)) == 3 and read_ends(run_dir), "three starts ended", 240,
                            run_dir, job_id)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    assert [(e["how"], e["failures"], e["requeued"]) for e in ends] == [
        ("FAILED", 1, True), ("FAILED", 2, True), ("FAILED", 3, False)], ends
    assert all(e["exit_code"] >= 129 and e["max_failures"] == 2 for e in ends), ends
    hosts = [subprocess.run(["scontrol", "show", "hostnames", s.hosts], capture_output=True, text=True).stdout.split()
             for s in segments.read(run_dir)]
    assert [e["died"] for e in ends] == [{"rank": 1, "host": h[1]} for h in hosts], (ends, hosts)
    first = f"rank 1 died on host {hosts[0][1]} (exit {ends[0]['exit_code']})"
    assert f"{first}\n    failure 1 of at most 2, requeued" in requeued, requeued
    failed = run_cluster("status", run_dir).stdout
    assert failed.count("    rank 1 died on host n") == 3 and first in failed, failed
    log = job_logs(run_dir)
    assert "failure 3 of this run, and max_failures is 2: not requeued" in log, log[-3000:]
    assert f"bin/run-cluster resume {run_dir}" in log


def test_the_lsf_watchdog_ends_a_hung_single_host_run_and_names_it(cpu_image, cluster_nodes, demo_data, runs_dir,
                                                                   lsf_path, tmp_path):
    done = run_cluster(with_hang_timeout(tmp_path, "ci-lsf", "one_gpu"), "one_gpu", "demo",
                       "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
                       "--set", "trainer.max_epochs=3", "--run-id", "lsf-hung", "--no-wait")
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = runs_dir / "lsf-hung"
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    pid = 0
    try:
        host, pid, stopped = stop_rank_after_an_epoch(run_dir, 0)
        (end,) = wait_for_run(lambda: read_ends(run_dir), "the hung job ended", HANG_S + 60, run_dir)
        ended_after = time.time() - stopped
        rerun = wait_for_run(lambda: len(segments.read(run_dir)) > 1 and segments.read(run_dir)[1], "the requeued run",
                             60, run_dir)
    finally:
        subprocess.run(["bkill", job_id], capture_output=True)
        if pid:
            subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    log = "".join(path.read_text() for path in sorted((run_dir / "logs").glob("*.err")))  # LSF's -e: stderr
    assert ended_after < HANG_S + 60, ended_after
    assert f"error: rank 0 on host {host} made no step for" in log, log[-3000:]
    assert end["how"] == "HANG" and end["stuck"]["host"] == host and end["requeued"], end
    assert end["excluded"] == [{"host": host, "why": f"rank 0 made no step for {end['stuck']['silent_s']} s"}], end
    assert host not in rerun.hosts, rerun  # bmod -R "select[hname!=HOST]" before brequeue: it runs elsewhere


def test_an_lsf_host_failed_whose_sigint_ends_the_batch_shell_first_still_ends_node_fail(cpu_image, cluster_nodes,
                                                                                          lsf_path, runs_dir, tmp_path):
    """LSF shuts a job with a failed host down with SIGINT first: on a loaded machine it ended the batch shell before
    its wait saw a rank die, and the segment ended FAILED (the CI of 65961fb). Here the host is marked unavail and
    the SIGINT reaches the shell before any rank ends: the segment still ends NODE_FAIL, naming the host."""
    run_dir, job_id = stop_sh_run("ci-lsf", "two_hosts", "lsf-sigint-first", tmp_path, runs_dir)
    state = Path(os.environ["CT_LSF_STATE"])
    down = state / "hosts"
    try:
        wait_for_run(lambda: job_logs(run_dir).count("[test] segment 1 running") == 2, "both ranks run", 180, run_dir)
        host = segments.read(run_dir)[0].hosts.split()[-1]
        down.mkdir(exist_ok=True)
        (down / host).write_text("unavail\n")  # what standin.py --host-down writes, without ending the tasks on it
        os.kill(int((state / job_id / "pid").read_text()), signal.SIGINT)  # the batch shell alone
        wait_for_run(lambda: segments.read(run_dir)[0].how, "segment 1 ended", 60, run_dir)
    finally:
        shutil.rmtree(down, ignore_errors=True)
        subprocess.run(["bkill", job_id], capture_output=True)
    (first, *_) = segments.read(run_dir)
    assert first.how == "NODE_FAIL" and first.failed_nodes == [host], (first, job_logs(run_dir)[-2000:])


def test_an_lsf_host_failed_under_a_two_host_run_is_named_and_left_out_of_the_rerun(cpu_image, cluster_nodes, lsf_path,
                                                                                    runs_dir, tmp_path, monkeypatch):
    """The second host of a running 2-host blaunch job fails (the stand-in's trigger, tests/lsf/host_failure.py):
    bhosts shows it unavail, LSF shuts the job down and reruns it (bsub -r). The segment ends NODE_FAIL naming that
    host, and the rerun runs without it, though it is back by then; `status` says it was left out."""
    standin = str(ROOT / "tests" / "lsf" / "standin.py")
    monkeypatch.setenv("CT_LSF_REQUEUE_DELAY", "4")  # the host is back before the rerun is dispatched
    monkeypatch.setenv("CT_LSF_TERMINATE_INTERVAL", "5")
    run_dir, job_id = stop_sh_run("ci-lsf", "two_hosts", "lsf-hostfail", tmp_path, runs_dir)
    host = ""
    try:
        wait_for_run(lambda: job_logs(run_dir).count("[test] segment 1 running") == 2, "both ranks run", 180, run_dir)
        host = segments.read(run_dir)[0].hosts.split()[-1]  # not the first host: its batch shell records the failure
        subprocess.run([standin, "--host-down", host], check=True)
        wait_for_run(lambda: segments.read(run_dir)[0].how, "segment 1 ended", 60, run_dir)
        subprocess.run([standin, "--host-up", host], check=True)
        found = wait_for_run(lambda: len(segments.read(run_dir)) > 1 and segments.read(run_dir), "the rerun", 60,
                             run_dir)
        status = run_cluster("status", run_dir).stdout
    finally:
        subprocess.run(["bkill", job_id], capture_output=True)
        if host:
            subprocess.run([standin, "--host-up", host], capture_output=True)
    log = job_logs(run_dir)
    assert found[0].how == "NODE_FAIL" and found[0].failed_nodes == [host], (found, log[-2000:])
    assert host not in found[1].hosts.split(), found  # bmod -R "select[hname!=HOST]" before LSF's rerun
    assert re.search(rf"NODE_FAIL( \(exit \d+\))?: a node failed \({host}\)", status), status
    assert re.search(rf"^  excluded: {host} \(", status, re.M), status
