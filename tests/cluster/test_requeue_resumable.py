"""Issue 56 item 1 on the real test Slurm cluster, inside the image, side by side: an unmodified script (a plain
Python loop, no signal handling) warned at its time limit (`scancel --batch --signal=USR1`, what
`--signal=B:USR1@grace_s` delivers: tests/cluster/test_long_runs.py proves the limit sends it) ends once with the
cause and is not requeued; on 2 nodes x 2 ranks, the first node's ranks' exception is recorded as that exception
(its exit code, rank 0), although srun ends the other node's ranks with SIGTERM and exits 143, and is not requeued.
(The batch shell's logic with stand-ins: tests/host/test_requeue_resumable.py.)"""
import re
import subprocess
from pathlib import Path

import pytest
from conftest import job_logs, manifest, run_cluster, wait_for_run

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
LOOP = 'import time\nprint("looping", flush=True)\nwhile True:\n    time.sleep(1)\n'
# both ranks of the first node raise: srun names them at once ("n1: tasks 0-1: Exited with exit code 1")
RAISES = ('import os, time\nprint(f"rank {os.environ[\'RANK\']} up", flush=True)\n'
          'if os.environ["NODE_RANK"] == "0":\n    time.sleep(3)\n    raise ValueError("a bad batch")\ntime.sleep(120)\n')
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def queued(profile: str, run_id: str, script: str, where: Path, *options: str) -> tuple:
    code = where / run_id
    code.mkdir()
    (code / "train.py").write_text(script)
    done = run_cluster("ci-slurm", profile, "--run-id", run_id, "--no-wait", "--stale-image-ok", *options, "--",
                       "python", "train.py", cwd=code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resume: not known to resume" in done.stdout, done.stdout
    return manifest(where / "runs" / run_id)["scheduler"]["job_id"]


def slurm_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return " ".join(f for f in out.split() if f.startswith(("JobState=", "Restarts=")))


def test_a_warned_loop_and_a_ranks_exception_each_end_once_unrequeued(cpu_image, slurm_cluster, runs_dir):
    where = runs_dir.parent
    loop_job, raise_job = queued("n1_gpu1", "loop", LOOP, where), queued("n2_gpu2", "raises", RAISES, where,
                                                                     "--set", "data.rank_mem_gb=1")
    loop_dir, raise_dir = runs_dir / "loop", runs_dir / "raises"
    try:
        wait_for_run(lambda: "looping" in job_logs(loop_dir), "the loop started", 300, loop_dir)
        subprocess.run(["scancel", "--batch", "--signal=USR1", loop_job], check=True)
        for run_dir in (loop_dir, raise_dir):
            wait_for_run(lambda: (segments.read(run_dir) or [segments.Segment(0)])[-1].how, "the segment ended", 300,
                         run_dir)
        # the batch shell has exited: Slurm ends the job, and a requeued one would be PENDING with Restarts=1
        for job_id in (loop_job, raise_job):
            wait_for_run(lambda: slurm_state(job_id).split(" ")[0].split("=")[-1] in FINAL, "the job ended", 60,
                         runs_dir)
            assert slurm_state(job_id) == "JobState=FAILED Restarts=0", slurm_state(job_id)
    finally:
        subprocess.run(["scancel", loop_job, raise_job], capture_output=True)
    (loop,) = segments.read(loop_dir)
    assert (loop.how, loop.exit_code, loop.saved) == ("TIMEOUT", 138, False), job_logs(loop_dir)[-3000:]
    status = run_cluster("status", loop_dir).stdout
    assert " TIMEOUT" in status and ("cause: the time limit was reached and the script saved no checkpoint: it would "
                                     "start again from scratch (exit 138), so it was not requeued") in status, status
    (raised,) = segments.read(raise_dir)
    log = job_logs(raise_dir)
    # every rank raises: the record names the one srun saw exit first, on its host ("srun: error: n1: task 1: ...")
    host, rank = re.search(r"srun: error: (\S+): tasks? (\d+)[-\d]*: Exited with exit code 1", log).groups()
    assert (raised.how, raised.exit_code, raised.died, raised.failures) == (
        "FAILED", 1, {"rank": int(rank), "host": host}, None), log[-3000:]
    assert "ValueError: a bad batch" in log and "requeueing" not in log, log[-3000:]
    status = run_cluster("status", raise_dir).stdout
    said = f"rank {rank} on host {host} exited 1 (its own exit, an exception: not requeued)"
    assert f"    {said}" in status and f"cause: {said}" in status and " FAILED" in status, status
