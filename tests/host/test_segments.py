"""The batch shell's side of long runs, run for real in bash with stand-ins for srun, scontrol and apptainer: the
warning signal reaches the training step, the step's "saved, requeue me" exit requeues the job, every segment is
recorded. (How the host weighs that record against the scheduler and its accounting: tests/host/test_end_states.py.)"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_cluster

from cluster_train.shared.exit_codes import REQUEUE
# srun: drop its options, run the task; scontrol: the node list, and record a requeue; apptainer: a "training" that
from cluster_train.host.runs import causes, segments

# saves and exits REQUEUE on SIGUSR1 or SIGTERM or when the warning's stop file appears (as the trainer does:
# cluster_train/image/stop.py), or completes after $CT_FAKE_SECONDS
FAKES = {
    "srun": '#!/bin/bash\nwhile [[ "$1" == -* ]]; do shift; done\nexec "$@"\n',
    "scontrol": '#!/bin/bash\nif [ "$1" = requeue ]; then echo "$2" >> "$CT_FAKE_DIR/requeued"; else echo n1; fi\n',
    "apptainer": f'#!/bin/bash\ntrap \'echo saved; kill $s; exit {REQUEUE}\' USR1 TERM\n'
                 'sleep "${CT_FAKE_SECONDS:-30}" >/dev/null 2>&1 & s=$!\necho "training segment $CT_SEGMENT"\n'
                 'while kill -0 $s 2>/dev/null; do\n'
                 f'  if [ -f "$CT_STOP_FILE" ]; then echo "saved ($(cat "$CT_STOP_FILE"))"; kill $s; exit {REQUEUE}; fi\n'
                 '  sleep 0.1 & wait $!\ndone\nwait $s\n',
}


def rendered_slurm_script(store, tmp_path, cluster="ci-slurm", profile="n1_gpu1") -> Path:
    done = run_cluster(cluster, profile, "demo", "--dry-run", "--run-id", "long")
    assert done.returncode == 0, done.stderr
    script = tmp_path / "job.sh"
    script.write_text(done.stdout.split("nothing submitted) ---\n", 1)[1])
    return script


def start(script: Path, tmp_path: Path, seconds: str, fakes_text=None, **env) -> subprocess.Popen:
    fakes = tmp_path / "fakes"
    fakes.mkdir(exist_ok=True)
    for name, text in (fakes_text or FAKES).items():
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n1",
           "SLURM_JOB_NUM_NODES": "1", "CT_FAKE_DIR": str(tmp_path), "CT_FAKE_SECONDS": seconds, **env}
    return subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def signal_when_training(job: subprocess.Popen, signum=signal.SIGUSR1) -> str:
    """Send the signal once the step runs (the traps are set by then); the whole output after the job ends."""
    seen = []
    for line in job.stdout:
        seen.append(line)
        if line.startswith("training segment"):  # the fake's trap and its "training" are set up by then
            job.send_signal(signum)
            break
    rest, _ = job.communicate(timeout=60)
    return "".join(seen) + rest


def test_the_warning_saves_requeues_and_every_segment_is_recorded(store, tmp_path):
    script = rendered_slurm_script(store, tmp_path)
    run_dir = store / "runs" / "long"
    (run_dir / "logs").mkdir(parents=True)
    first = start(script, tmp_path, "30")
    out = signal_when_training(first)  # what Slurm's --signal=B:USR1@grace does before the time limit
    assert first.returncode == 0, out
    # the trainer's ranks are warned by the stop file, not by a signal (cluster_train/image/stop.py)
    assert "saved (SIGUSR1)" in out and "checkpoint saved (REQUEUED); requeueing job 4242 (segment 1" in out
    assert (run_dir / "logs" / "stop-1").read_text() == "SIGUSR1\n"
    assert (tmp_path / "requeued").read_text().split() == ["4242"]
    second = start(script, tmp_path, "0")  # the requeued job runs the same script again and completes
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0 and "training segment 2" in out, out
    found = segments.read(run_dir)
    assert [(s.number, s.how, s.job_id, s.hosts) for s in found] == [(1, "REQUEUED", "4242", "n1"),
                                                                     (2, "COMPLETED", "4242", "n1")]


def test_a_cancel_is_terminated_and_a_preemption_saves_and_requeues(store, tmp_path):
    script = rendered_slurm_script(store, tmp_path)
    run_dir = store / "runs" / "long"
    (run_dir / "logs").mkdir(parents=True)
    cancelled = start(script, tmp_path, "30")
    out = signal_when_training(cancelled, signal.SIGTERM)  # scancel signals the batch shell and the steps
    assert cancelled.returncode == 143 and "saved" in out, out
    assert segments.read(run_dir)[-1].how == "TERMINATED" and not (tmp_path / "requeued").exists()
    preempted = start(script, tmp_path, "30")
    for line in preempted.stdout:  # Slurm's preemption signals only the steps, and requeues only a job still there
        if line.startswith("training segment"):  # after GraceTime: the shell requeues the job itself
            subprocess.run(["pkill", "-TERM", "-f", str(tmp_path / "fakes" / "apptainer")], check=True)
            break
    out, _ = preempted.communicate(timeout=60)
    assert preempted.returncode == 0 and "checkpoint saved (PREEMPTED); requeueing job 4242" in out, out
    assert (tmp_path / "requeued").read_text().split() == ["4242"]
    assert [s.how for s in segments.read(run_dir)] == ["TERMINATED", "PREEMPTED"]


@pytest.mark.slow
def test_an_lsf_rank_that_dies_ends_the_other_ranks_and_is_named(store, tmp_path):
    """blaunch leaves the other ranks running (srun --kill-on-bad-exit=1 ends them): the batch shell does it, with
    SIGKILL for a rank stuck in a collective with the dead one (here: one that ignores SIGTERM). A rank killed by a
    signal is a failure another allocation may not meet: the job is requeued (max_failures)."""
    script = rendered_slurm_script(store, tmp_path, "ci-lsf", "two_hosts")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("hA\nhB\n")
    (store / "runs" / "long" / "logs").mkdir(parents=True)
    fakes = {"blaunch": '#!/bin/bash\nshift 2\nexec "$@"\n', "brequeue": '#!/bin/bash\necho "$1" > "$CT_FAKE_DIR/requeued"\n',
             "apptainer": '#!/bin/bash\necho "rank $CT_GLOBAL_RANK training"\n'
                          'if [ "$CT_GLOBAL_RANK" = 1 ]; then sleep 1; kill -9 $$; fi\ntrap "" TERM\nexec sleep 300\n'}
    started = time.time()
    job = start(script, tmp_path, "0", fakes, LSB_JOBID="77", LSB_DJOB_HOSTFILE=str(hostfile),
                LSB_HOSTS="hA hB")
    out, _ = job.communicate(timeout=90)
    ended_after = time.time() - started
    assert job.returncode == 0 and "rank 1 on host hB exited with status 137" in out, out
    assert ended_after < 60, ended_after
    (end,) = segments.read(store / "runs" / "long")
    assert (end.how, end.died, end.requeued) == ("FAILED", {"rank": 1, "host": "hB"}, True), end
    assert "failure 1 of at most 2 (max_failures): requeueing job 77" in out and (tmp_path / "requeued").exists()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "job-77.err").write_text(out)
    assert causes.diagnose(tmp_path).startswith("rank 1 died on host hB (exit status 137)")


def test_a_failing_step_is_recorded_failed_and_requeues_are_capped(store, tmp_path):
    script = rendered_slurm_script(store, tmp_path)
    run_dir = store / "runs" / "long"
    (run_dir / "logs").mkdir(parents=True)
    lines = [json.dumps({"event": "start", "segment": n, "job_id": "1"}) for n in range(1, 12)]
    (run_dir / "logs" / "segments.jsonl").write_text("\n".join(lines) + "\n")  # ten requeues used already
    job = start(script, tmp_path, "30")
    out = signal_when_training(job)
    assert job.returncode == REQUEUE and "all 10 requeue(s) used" in out, out
    assert not (tmp_path / "requeued").exists()
    assert segments.read(run_dir)[-1].how == "TIMEOUT"


def test_a_segment_whose_shell_was_killed_gets_its_end_once_from_whoever_continues_the_run(tmp_path):
    (tmp_path / "logs").mkdir()
    start = {"event": "start", "segment": 1, "job_id": "7_0", "time": "2026-11-27T01:00:00+0000", "hosts": "n1"}
    (tmp_path / segments.FILE).write_text(json.dumps(start) + "\n")
    segments.record_unended_end(tmp_path, "CANCELLED", "cancelled by bin/run-cluster cancel at 2026-11-27T01:01:00")
    segments.record_unended_end(tmp_path, "UNKNOWN", "a second resume: the end is recorded already")
    (found,) = segments.read(tmp_path)
    assert (found.how, found.exit_code, found.job_id) == ("CANCELLED", None, "7_0") and found.end, found
    assert "running" not in found.line() and "CANCELLED" in found.line(), found.line()
