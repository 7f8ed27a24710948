"""The LSF stand-in's long-run behaviour, as LSF documents it: the warning action (-wa/-wt) before the run limit (-W),
the run limit (SIGUSR2, then the kill; EXIT with TERM_RUNLIMIT), brequeue (also from inside the job), requeue exit
values (-Q), bhist's record of every run. Plain bash jobs, no image; an LSF minute is a few seconds here."""
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real timers of seconds each: in make test, not in make test-fast

LSF = Path(__file__).resolve().parents[1] / "lsf"
MINUTE_S = 3  # one LSF minute (-W, -wt) in these tests


@pytest.fixture
def lsf_env(tmp_path):
    return {**os.environ, "PATH": f"{LSF}:{os.environ['PATH']}", "CT_LSF_STATE": str(tmp_path / "lsf"),
            "CT_LSF_MINUTE_SECONDS": str(MINUTE_S), "CT_LSF_REQUEUE_DELAY": "1", "CT_LSF_RUNLIMIT_GRACE": "1",
            "CT_LSF_TERMINATE_INTERVAL": "1"}


def submit(body: str, env, directives: str = "", *argv) -> str:
    script = f"#!/bin/bash\n#BSUB -q ci\n{directives}{body}"
    done = subprocess.run(["bsub", *argv], input=script, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return re.search(r"Job <(\d+)> is submitted", done.stdout).group(1)


def lsf(*argv, env) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, env=env)


def wait_end(job_id: str, env, timeout_s: float = 40) -> list:
    """[stat, exit_code, exit_reason] once the job is DONE or EXIT."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        fields = lsf("bjobs", "-noheader", "-o", "stat exit_code exit_reason", job_id, env=env).stdout.split()
        if fields and fields[0] in ("DONE", "EXIT"):
            return fields
        time.sleep(0.2)
    lsf("bkill", job_id, env=env)
    raise AssertionError(f"LSF stand-in job {job_id} did not end in {timeout_s} s")


def test_warning_action_arrives_wt_minutes_before_the_run_limit(lsf_env, tmp_path):
    out = tmp_path / "out.txt"
    body = ('echo "start $(date +%s.%N)"\n'
            'trap \'echo "warned $(date +%s.%N)"; exit 0\' USR1\n'
            'sleep 60 & wait\n')
    job_id = submit(body, lsf_env, f"#BSUB -W 3\n#BSUB -wa USR1\n#BSUB -wt 2\n#BSUB -o {out}\n")
    assert wait_end(job_id, lsf_env) == ["DONE", "0", "-"]
    times = dict(line.split() for line in out.read_text().splitlines())
    lead = 3 * MINUTE_S - (float(times["warned"]) - float(times["start"]))
    assert 2 * MINUTE_S - 1 < lead < 2 * MINUTE_S + 1.5, lead
    assert "Signal <USR1> sent to the job (job warning action)" in lsf("bhist", "-l", job_id, env=lsf_env).stdout


def test_run_limit_sends_usr2_and_ends_the_job_term_runlimit(lsf_env, tmp_path):
    out = tmp_path / "out.txt"
    began = time.time()
    job_id = submit("trap 'echo got USR2; exit 140' USR2\necho running\nsleep 60 & wait\n", lsf_env,
                    f"#BSUB -W 1\n#BSUB -o {out}\n")
    assert wait_end(job_id, lsf_env) == ["EXIT", "140", "TERM_RUNLIMIT"]
    assert MINUTE_S - 0.5 < time.time() - began < MINUTE_S + 4
    assert out.read_text().splitlines() == ["running", "got USR2"]
    history = lsf("bhist", "-l", job_id, env=lsf_env).stdout
    assert "Completed <exit>; TERM_RUNLIMIT: job killed after reaching LSF run time limit" in history


def test_run_limit_kills_a_job_that_ignores_the_signals(lsf_env):
    job_id = submit("trap '' USR2 INT TERM\nwhile :; do sleep 0.2; done\n", lsf_env, "#BSUB -W 1\n")
    assert wait_end(job_id, lsf_env) == ["EXIT", "137", "TERM_RUNLIMIT"]
    signals = re.findall(r"Signal <(\w+)> sent to the job \(run limit\)",
                         lsf("bhist", "-l", job_id, env=lsf_env).stdout)
    assert signals == ["USR2", "INT", "TERM", "KILL"]


def test_brequeue_from_the_job_itself_reruns_it_with_the_same_id(lsf_env, tmp_path):
    out = tmp_path / "out_%J.txt"
    body = ('echo "run id=$LSB_JOBID restart=${LSB_RESTART:-N} restart_pid=${LSB_RESTART_PID:-none}"\n'
            '[ "${LSB_RESTART:-}" = Y ] && exit 0\n'
            'trap \'brequeue "$LSB_JOBID"; exit 0\' USR1\n'
            'sleep 60 & wait\n')
    job_id = submit(body, lsf_env, f"#BSUB -W 3\n#BSUB -wa USR1\n#BSUB -wt 2\n#BSUB -o {out}\n")
    assert wait_end(job_id, lsf_env) == ["DONE", "0", "-"]
    lines = (tmp_path / f"out_{job_id}.txt").read_text().splitlines()  # -o: appended across runs
    assert lines[0] == f"run id={job_id} restart=N restart_pid=none"
    assert lines[1] == f"Job <{job_id}> is being requeued"
    assert re.fullmatch(rf"run id={job_id} restart=Y restart_pid=\d+", lines[2]), lines
    history = lsf("bhist", "-l", job_id, env=lsf_env).stdout
    assert "Signal <REQUEUE_PEND> requested by user or administrator" in history
    assert "TERM_REQUEUE_OWNER: job killed and requeued by owner" in history
    assert history.count("Starting (Pid") == 2 and "Done successfully" in history


def test_bmod_leaves_a_host_out_of_the_requeued_run(lsf_env, tmp_path):
    """bmod -R replaces the job's resource requirements; a running job's take effect at its requeue (issue 43:
    a failed node left out)."""
    out = tmp_path / "out.txt"
    body = ('echo "run on $LSB_HOSTS"\n[ "${LSB_RESTART:-}" = Y ] && exit 0\n'
            'bmod -R "span[hosts=1]" -R "select[hname!=$LSB_HOSTS]" "$LSB_JOBID"\nbrequeue "$LSB_JOBID"\nexit 0\n')
    job_id = submit(body, lsf_env, f'#BSUB -R "span[hosts=1]"\n#BSUB -o {out}\n')
    assert wait_end(job_id, lsf_env) == ["DONE", "0", "-"]
    runs = [line.split()[-1] for line in out.read_text().splitlines() if line.startswith("run on")]
    assert len(runs) == 2 and runs[0] != runs[1], out.read_text()
    refused = lsf("bmod", "-x", job_id, env=lsf_env)
    assert refused.returncode != 0 and "bmod -x is not implemented" in refused.stderr + refused.stdout


def test_requeue_exit_value_reruns_the_job(lsf_env, tmp_path):
    out = tmp_path / "out.txt"
    body = ('echo "run restart=${LSB_RESTART:-N} requeue_values=$LSB_EXIT_REQUEUE"\n'
            '[ "${LSB_RESTART:-}" = Y ] || exit 75\n')
    job_id = submit(body, lsf_env, f'#BSUB -Q "75"\n#BSUB -o {out}\n')
    assert wait_end(job_id, lsf_env) == ["DONE", "0", "-"]
    assert out.read_text().splitlines() == ["run restart=N requeue_values=75", "run restart=Y requeue_values=75"]
    history = lsf("bhist", "-l", job_id, env=lsf_env).stdout
    assert "Exited with exit code 75" in history and "Pending: Job has been requeued (requeue exit value 75)" in history


def test_an_exit_value_not_listed_ends_the_job(lsf_env):
    job_id = submit("exit 3\n", lsf_env, '#BSUB -Q "75 EXCLUDE(76)"\n')
    assert wait_end(job_id, lsf_env) == ["EXIT", "3", "-"]
    assert lsf("bhist", "-l", job_id, env=lsf_env).stdout.count("Starting (Pid") == 1


def test_bhist_shows_every_segment_after_the_job_ended(lsf_env, tmp_path):
    """Run 1: warned, requeues itself. Run 2: ignores the warning and meets the run limit."""
    body = ('if [ "${LSB_RESTART:-}" = Y ]; then trap "" USR1; else trap \'brequeue "$LSB_JOBID"; exit 0\' USR1; fi\n'
            'sleep 60 & wait\n')
    job_id = submit(body, lsf_env, f"#BSUB -W 2\n#BSUB -wa USR1\n#BSUB -wt 1\n#BSUB -o {tmp_path / 'out.txt'}\n")
    assert wait_end(job_id, lsf_env) == ["EXIT", "140", "TERM_RUNLIMIT"]
    history = lsf("bhist", "-l", job_id, env=lsf_env).stdout
    ends = re.findall(r"Completed <exit>; (TERM_\w+)", history)
    assert ends == ["TERM_REQUEUE_OWNER", "TERM_RUNLIMIT"], history
    assert history.count("Starting (Pid") == 2
    assert re.search(r"RUN\s+USUSP", history)  # the summary table
    assert lsf("bhist", job_id, env=lsf_env).stdout.splitlines()[2].split()[0] == job_id


def test_bkill_ends_the_job_and_brequeue_e_reruns_it(lsf_env, tmp_path):
    out = tmp_path / "out.txt"
    job_id = submit('echo "run restart=${LSB_RESTART:-N}"\n[ "${LSB_RESTART:-}" = Y ] && exit 0\nsleep 60 & wait\n',
                    lsf_env, f"#BSUB -o {out}\n")
    deadline = time.time() + 10
    while lsf("bjobs", "-noheader", "-o", "stat", job_id, env=lsf_env).stdout.strip() != "RUN":
        assert time.time() < deadline
        time.sleep(0.1)
    assert lsf("bkill", job_id, env=lsf_env).stdout.strip() == f"Job <{job_id}> is being terminated"
    stat, code, reason = wait_end(job_id, lsf_env)
    assert (stat, reason) == ("EXIT", "TERM_OWNER") and code in ("130", "143")  # SIGINT and SIGTERM, SIGKILL later
    assert lsf("brequeue", job_id, env=lsf_env).returncode != 0  # default: running jobs only
    assert lsf("brequeue", "-e", job_id, env=lsf_env).stdout.strip() == f"Job <{job_id}> is being requeued"
    assert wait_end(job_id, lsf_env) == ["DONE", "0", "-"]
    assert out.read_text().splitlines() == ["run restart=N", "run restart=Y"]


@pytest.mark.parametrize("directive, message", [
    ("-wt 2m", "Bad job action warning time"),
    ("-wa NOSUCHSIG", "Bad job warning action"),
    ('-Q "seventy-five"', "Bad requeue exit value specification"),
])
def test_bsub_refuses_bad_warning_and_requeue_options(lsf_env, directive, message):
    done = subprocess.run(["bsub"], input=f"#!/bin/bash\n#BSUB -q ci\n#BSUB {directive}\ntrue\n", capture_output=True,
                          text=True, env=lsf_env)
    assert done.returncode != 0 and message in done.stderr
