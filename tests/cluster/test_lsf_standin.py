"""The LSF stand-in refuses what bsub refuses and sets what LSF sets (no image, no Slurm needed)."""
import os
import subprocess
import time
from pathlib import Path

import pytest

LSF = Path(__file__).resolve().parents[1] / "lsf"


@pytest.fixture
def lsf_env(tmp_path):
    return {**os.environ, "PATH": f"{LSF}:{os.environ['PATH']}", "CT_LSF_STATE": str(tmp_path / "lsf")}


def bsub(script: str, env):
    return subprocess.run(["bsub"], input=script, capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "directive, message",
    [
        ("-q gpunope", "gpunope: No such queue. Job not submitted."),
        ("-W 4h", "4h: Bad RUNLIMIT specification"),
        ('-gpu "num=1:mode=exclusive"', "Invalid GPU requirement"),
        ('-R "rusage[mem=16 GB]"', "Bad resource requirement syntax"),
        ('-R "rusage[memory=16GB]"', "Bad resource requirement syntax"),
        ("-n four", "Bad argument for option -n"),
        ("--ntasks=4", "illegal option"),
    ],
)
def test_bsub_refuses_what_lsf_refuses(lsf_env, tmp_path, directive, message):
    done = bsub(f"#!/bin/bash\n#BSUB -q ci\n#BSUB {directive}\necho ran\n", lsf_env)
    assert done.returncode != 0 and message in done.stderr
    assert not (tmp_path / "lsf").exists() or not any((tmp_path / "lsf").glob("1*"))


def test_bsub_runs_the_body_with_lsf_variables(lsf_env, tmp_path):
    out = tmp_path / "out_%J.txt"
    script = (f'#!/bin/bash\n#BSUB -q ci\n#BSUB -n 4\n#BSUB -R "span[ptile=2]"\n#BSUB -R "rusage[mem=2GB]"\n'
              f'#BSUB -gpu "num=1:mode=exclusive_process"\n#BSUB -W 0:10\n#BSUB -o {out}\n'
              'echo "id=$LSB_JOBID hosts=$LSB_HOSTS mcpu=$LSB_MCPU_HOSTS gpus=$CUDA_VISIBLE_DEVICES"\n'
              'cat "$LSB_DJOB_HOSTFILE"\n')
    done = bsub(script, lsf_env)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.split("<")[1].split(">")[0]
    for _ in range(100):
        state = subprocess.run(["bjobs", "-noheader", "-o", "stat exit_code", job_id], capture_output=True,
                               text=True, env=lsf_env).stdout.split()
        if state[0] in ("DONE", "EXIT"):
            break
        time.sleep(0.1)
    assert state[:2] == ["DONE", "0"]
    text = (tmp_path / f"out_{job_id}.txt").read_text()  # %J expanded
    assert f"id={job_id} hosts=n1 n1 n2 n2 mcpu=n1 2 n2 2 gpus=0" in text
    assert text.splitlines()[1:] == ["n1", "n1", "n2", "n2"]


def array_stats(job_id: str, env) -> list:
    out = subprocess.run(["bjobs", "-noheader", "-o", "jobindex stat", job_id], capture_output=True, text=True,
                         env=env).stdout
    return [line.split()[1] for line in out.splitlines()]


def test_a_job_array_runs_each_element_with_its_index_at_most_k_at_once(lsf_env, tmp_path):
    """-J "name[1-N]%K" as IBM documents job arrays: elements JOBID[i], LSB_JOBINDEX, %I, a cap on running ones."""
    out = tmp_path / "out_%J_%I.txt"
    script = (f'#!/bin/bash\n#BSUB -q ci\n#BSUB -J "sw[1-4]%2"\n#BSUB -o {out}\n'
              'echo "index=$LSB_JOBINDEX id=$LSB_JOBID name=$LSB_JOBNAME"; sleep 1\n')
    done = bsub(script, lsf_env)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.split("<")[1].split(">")[0]
    most = 0
    for _ in range(200):
        stats = array_stats(job_id, lsf_env)
        most = max(most, stats.count("RUN"))
        if stats == ["DONE"] * 4:
            break
        time.sleep(0.05)
    assert stats == ["DONE"] * 4 and most == 2
    for i in range(1, 5):
        assert (tmp_path / f"out_{job_id}_{i}.txt").read_text() == f"index={i} id={job_id} name=sw[{i}]\n"
    one = subprocess.run(["bjobs", "-noheader", "-o", "stat", f"{job_id}[3]"], capture_output=True, text=True,
                         env=lsf_env)
    assert one.stdout.split() == ["DONE"]


def test_bkill_of_an_array_ends_every_element(lsf_env, tmp_path):
    done = bsub('#!/bin/bash\n#BSUB -q ci\n#BSUB -J "sw[1-3]%1"\nsleep 30\n', lsf_env)
    job_id = done.stdout.split("<")[1].split(">")[0]
    subprocess.run(["bkill", job_id], capture_output=True, env=lsf_env, check=True)
    for _ in range(100):
        if array_stats(job_id, lsf_env) == ["EXIT"] * 3:
            break
        time.sleep(0.1)
    assert array_stats(job_id, lsf_env) == ["EXIT"] * 3


@pytest.mark.parametrize("name", ["sw[0-3]", "sw[3-1x]", "sw[1-2]%0", "sw[1-1001]"])
def test_a_bad_array_is_refused(lsf_env, name):
    done = bsub(f'#!/bin/bash\n#BSUB -q ci\n#BSUB -J "{name}"\necho ran\n', lsf_env)
    assert done.returncode == 255 and "Bad job name" in done.stderr


def test_an_array_element_requeues_itself_alone(lsf_env, tmp_path):
    """The batch shell's requeue (the LSF adapter's command) names JOBID[i] inside an array and JOBID outside one."""
    from cluster_train.host.schedulers import Lsf

    out = tmp_path / "out_%J_%I.txt"
    body = (f'echo "run index=$LSB_JOBINDEX restart=${{LSB_RESTART:-N}}"\n'
            f'case "$LSB_JOBINDEX${{LSB_RESTART:-}}" in 0|2) {Lsf.requeue_command}; exit 0 ;; esac\n')  # once
    env = {**lsf_env, "CT_LSF_REQUEUE_DELAY": "0.2"}
    array = bsub(f'#!/bin/bash\n#BSUB -q ci\n#BSUB -J "rq[1-3]%3"\n#BSUB -o {out}\n{body}', env)
    single = bsub(f'#!/bin/bash\n#BSUB -q ci\n#BSUB -o {tmp_path / "single_%J.txt"}\n{body}', env)
    array_id, single_id = (done.stdout.split("<")[1].split(">")[0] for done in (array, single))
    for _ in range(200):
        if array_stats(array_id, env) == ["DONE"] * 3 and array_stats(single_id, env) == ["DONE"]:
            break
        time.sleep(0.1)
    assert array_stats(array_id, env) == ["DONE"] * 3
    runs = {i: [line for line in (tmp_path / f"out_{array_id}_{i}.txt").read_text().splitlines()
                if line.startswith("run ")] for i in (1, 2, 3)}  # not brequeue's own words
    assert runs == {1: ["run index=1 restart=N"], 2: ["run index=2 restart=N", "run index=2 restart=Y"],
                    3: ["run index=3 restart=N"]}
    single_runs = (tmp_path / f"single_{single_id}.txt").read_text().splitlines()
    assert [line for line in single_runs if line.startswith("run ")] == ["run index=0 restart=N",
                                                                         "run index=0 restart=Y"]


def stat_when_ended(job_id: str, env, timeout_s: float = 20) -> list:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        state = subprocess.run(["bjobs", "-noheader", "-o", "stat exit_code exit_reason", job_id],
                               capture_output=True, text=True, env=env).stdout.split()
        if state[0] in ("DONE", "EXIT"):
            return state
        time.sleep(0.1)
    return state


def submitted(done) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.split("<")[1].split(">")[0]


def test_bsub_w_holds_a_job_until_its_dependencies_are_done(lsf_env, tmp_path):
    first = submitted(bsub(f"#!/bin/bash\n#BSUB -q ci\nsleep 1; date +%s.%N > {tmp_path}/first\n", lsf_env))
    script = f"#!/bin/bash\n#BSUB -q ci\ndate +%s.%N > {tmp_path}/second\n"
    second = submitted(subprocess.run(["bsub", "-w", f"done({first})", "-ti"], capture_output=True, text=True,
                                      input=script, env=lsf_env))
    assert stat_when_ended(second, lsf_env)[:2] == ["DONE", "0"]
    assert float((tmp_path / "first").read_text()) < float((tmp_path / "second").read_text())


def test_bsub_ti_ends_an_orphan_and_refuses_what_lsf_refuses(lsf_env, tmp_path):
    failing = submitted(bsub("#!/bin/bash\n#BSUB -q ci\nexit 3\n", lsf_env))
    orphan = submitted(subprocess.run(["bsub", "-w", f"done({failing}) && done({failing})", "-ti"], text=True,
                                      capture_output=True, input="#!/bin/bash\n#BSUB -q ci\necho ran\n", env=lsf_env))
    assert stat_when_ended(orphan, lsf_env) == ["EXIT", "130", "TERM_ORPHAN_SYSTEM"]
    said = subprocess.run(["bhist", "-l", orphan], capture_output=True, text=True, env=lsf_env).stdout
    assert "TERM_ORPHAN_SYSTEM" in said and "Starting" not in said
    for argv, message in ((["-w", "done(99999)"], "No matching job found"), (["-ti"], "must be used with -w"),
                          (["-w", f"ended({failing})"], "only done(job_ID)")):
        done = subprocess.run(["bsub", *argv], input="#!/bin/bash\n#BSUB -q ci\necho ran\n", capture_output=True,
                              text=True, env=lsf_env)
        assert done.returncode == 255 and message in done.stderr, (argv, done.stderr)


def test_cancelling_a_job_that_has_just_finished_is_no_error(lsf_env, monkeypatch):
    """bkill of a finished job exits 255, "Job has already finished": a cancel that raced the job's end (a sweep's
    element finishing as the sweep is cancelled) has nothing left to do."""
    from cluster_train.host.schedulers import adapter

    job = submitted(bsub("#!/bin/bash\n#BSUB -q ci\necho done\n", lsf_env))
    assert stat_when_ended(job, lsf_env)[0] == "DONE"
    said = subprocess.run(["bkill", job], capture_output=True, text=True, env=lsf_env)
    assert said.returncode != 0 and "Job has already finished" in said.stderr + said.stdout
    for key in ("PATH", "CT_LSF_STATE"):
        monkeypatch.setenv(key, lsf_env[key])
    adapter("lsf").cancel(job)
