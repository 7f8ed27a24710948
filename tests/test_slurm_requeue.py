"""What the launcher's requeue relies on, on the real test Slurm cluster, with plain bash jobs: the time-limit warning
signal reaches the batch shell (--signal=B:USR1@N), `scontrol requeue` from inside the batch script requeues the job
(same id, SLURM_RESTART_COUNT counts, --open-mode=append keeps one log), and a job of the higher-priority partition
`ci-high` preempts a `ci` job, which is requeued (SIGTERM first, GraceTime) and runs again.
Slurm's time limits are whole minutes and its signal timing has up to 60 s of jitter, so these take a minute or two.
The cluster forgets finished jobs a few seconds after they end (MinJobAge), so the jobs write their own records."""
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import release_requeued

pytestmark = pytest.mark.slurm


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
    job_id = sbatch(script, "-p", "ci", "--time=1", "--signal=B:USR1@50", "--requeue", "--open-mode=append",
                    "-o", str(out))
    found = wait_for(lambda: "end 0" in lines(out) and lines(out), "USR1 in the batch shell", 150, [job_id])
    times = dict(line.split() for line in found)
    lead = 60 - (float(times["usr1"]) - float(times["start"]))
    print(f"signal lead time before the 60 s limit: {lead:.1f} s (asked for 50 s)")
    assert 0 < lead <= 111, lead  # Slurm: the signal may come up to 60 s earlier than asked, never after the limit


def test_scontrol_requeue_from_the_batch_script(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    script = ("#!/bin/bash\n"
              'echo "run $SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0} at $(date +%s.%N)"\n'
              'if [ "${SLURM_RESTART_COUNT:-0}" -lt 1 ]; then\n'
              '  scontrol requeue "$SLURM_JOB_ID" && echo "requeued at $(date +%s.%N)"; sleep 60\n'
              "fi\n"
              'echo "end 0"\n')
    job_id = sbatch(script, "-p", "ci", "--time=5", "--requeue", "--open-mode=append", "-o", str(out))
    found = wait_for(lambda: "end 0" in lines(out) and lines(out), "second run", 300, [job_id])
    runs = [line for line in found if line.startswith("run ")]
    assert [r.split()[1:3] for r in runs] == [[job_id, f"restart={n}"] for n in range(2)], found
    requeued = [float(line.split()[-1]) for line in found if line.startswith("requeued at")]
    started = [float(r.split()[-1]) for r in runs]
    delays = [round(s - q, 1) for q, s in zip(requeued, started[1:])]
    print(f"scontrol requeue -> next start: {delays} s")
    fields = job_fields(job_id)
    assert not fields or fields.get("Restarts") == "1"


def test_a_higher_priority_partition_preempts_and_requeues(slurm_cluster, tmp_path):
    low_out, high_out = tmp_path / "low.out", tmp_path / "high.out"
    low = ("#!/bin/bash\n"
           'echo "low restart=${SLURM_RESTART_COUNT:-0} at $(date +%s.%N)"\n'
           '[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && { echo "end 0"; exit 0; }\n'
           'trap \'echo "TERM at $(date +%s.%N)"\' TERM\n'
           "sleep 300 & wait; sleep 300 & wait\n")
    low_id = sbatch(low, "-p", "ci", "-w", "n1", "--exclusive", "--time=5", "--requeue", "--open-mode=append",
                    "-o", str(low_out))
    wait_for(lambda: lines(low_out), "low job running", 60, [low_id])
    submitted = time.time()
    high_id = sbatch('#!/bin/bash\necho "high at $(date +%s.%N)"\nsleep 3\n', "-p", "ci-high", "-w", "n1",
                     "--exclusive", "--time=2", "-o", str(high_out))
    found = wait_for(lambda: "end 0" in lines(low_out) and lines(low_out), "low job's second run", 420,
                     [low_id, high_id])
    assert found[0].startswith("low restart=0") and found[-2].startswith("low restart=1"), found
    term = [float(line.split()[-1]) for line in found if line.startswith("TERM at")]
    high_at = float(lines(high_out)[0].split()[-1])
    rerun_at = float(found[-2].split()[-1])
    print(f"preemption: SIGTERM {term and round(term[0] - submitted, 1)} s after the high job was submitted, "
          f"high job started after {high_at - submitted:.1f} s, low job ran again {rerun_at - high_at:.1f} s after it")
    assert term, "the preempted batch shell got no SIGTERM (GraceTime)"
    assert high_at < rerun_at
