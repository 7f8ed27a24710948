"""What the launcher's requeue relies on, on the real test Slurm cluster, with a plain bash job: the time-limit warning
signal reaches the batch shell (--signal=B:USR1@N), and how early. (Requeue from the batch script and preemption are
proven with real training runs: tests/cluster/test_long_runs.py, tests/cluster/test_slurm_interruptions.py.)
Slurm's time limits are whole minutes and its signal timing has up to 60 s of jitter, so this takes a minute or two.
The cluster forgets finished jobs a few seconds after they end (MinJobAge), so the jobs write their own records."""
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import release_requeued

pytestmark = pytest.mark.slurm
LIMIT_S, LEAD_S = 120, 50  # the job's time limit and the warning lead it asks for


def sbatch(script: str, *options: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *options], input=script, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_fields(job_id: str) -> dict:
    """scontrol's view of the job; {} once Slurm has forgotten it (MinJobAge)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_for(predicate, what: str, timeout_s: float, job_ids=()):
    deadline, polls = time.time() + timeout_s, 0
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        polls += 1
        if polls % 8 == 0:  # every 2 s: a requeued job need not sit out Slurm's 120 s BeginTime here
            for job_id in job_ids:
                release_requeued(job_id)
        time.sleep(0.25)
    for job_id in job_ids:
        subprocess.run(["scancel", job_id])
    raise AssertionError(f"{what}: not within {timeout_s} s")


def lines(path: Path) -> list:
    return path.read_text().splitlines() if path.exists() else []


def test_time_limit_signal_reaches_the_batch_shell(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    script = ("#!/bin/bash\n"
              'echo "start $(date +%s.%N)"\n'
              'trap \'echo "usr1 $(date +%s.%N)"; echo "end 0"; exit 0\' USR1\n'
              "sleep 300 & wait\n")
    # A 2-minute limit, so that the asked-for lead (50 s) plus Slurm's early margin (up to 60 s) stays inside it: with
    # a 1-minute limit any lead would be sent at the job's first time-limit check and no wrong @N could be told.
    job_id = sbatch(script, "-p", "ci", f"--time={LIMIT_S // 60}", f"--signal=B:USR1@{LEAD_S}", "--requeue",
                    "--open-mode=append", "-o", str(out))
    found = wait_for(lambda: "end 0" in lines(out) and lines(out), "USR1 in the batch shell", LIMIT_S + 30, [job_id])
    times = dict(line.split() for line in found)
    lead = LIMIT_S - (float(times["usr1"]) - float(times["start"]))
    print(f"signal lead time before the {LIMIT_S} s limit: {lead:.1f} s (asked for {LEAD_S} s)")
    # Slurm checks time limits every 30 s: the signal comes up to 60 s earlier than asked (its manual) and was seen
    # up to 30 s later (tests/slurm notes); an @N outside that window, or no signal, fails
    assert LEAD_S - 30 <= lead <= LEAD_S + 60, lead
