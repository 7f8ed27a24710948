"""Issue 43 in the batch shell, run for real in bash with stand-ins for srun, scontrol and the ranks (as
test_segments.py does): the hang watchdog names the stuck rank and host, saves the stacks, ends the steps and
requeues the job with that node left out (ExcNodeList set from the TERM that Slurm's requeue sends); a rank killed by a
signal is requeued within max_failures and ends FAILED past it; an exception is not requeued; progress lines of an
earlier segment are not read as a hang. And hang_timeout as the profile gives it."""
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import yaml
from conftest import ROOT
from host.test_segments import rendered_slurm_script, start

from cluster_train.host.clusters import fields
from cluster_train.host.runs import segments
from cluster_train.shared.errors import UserError

# scontrol: record a requeue and end the batch shell with SIGTERM as Slurm's requeue does; record an update
SCONTROL = ('#!/bin/bash\ncase "$1" in\n  requeue) echo "$2" >> "$CT_FAKE_DIR/requeued"; kill -TERM $PPID ;;\n'
            '  update) echo "$*" >> "$CT_FAKE_DIR/updated" ;;\n  *) echo n1 ;;\nesac\n')
SRUN = '#!/bin/bash\nwhile [[ "$1" == -* ]]; do shift; done\nexec "$@"\n'
# two "ranks" in one step: rank 0 beats on at step 40, waiting; rank 1 froze at step 39 (its heartbeat stopped too)
HUNG = ('#!/bin/bash\nd="$CT_RUN_DIR/logs/progress"; mkdir -p "$d"; trap "exit 143" TERM\necho "training"\n'
        'now=$(date +%s); echo "39 $((now - 30)) $now 0.100 nB 12" > "$d/rank-1"\n'
        'echo "rank 1 frame" > "$d/rank-1.stack"\n'
        'while :; do now=$(date +%s); echo "40 $((now - 30)) $now 0.100 nA 11" > "$d/rank-0"; '
        'echo "rank 0 frame" > "$d/rank-0.stack"; sleep 0.3; done\n')
KILLED = '#!/bin/bash\necho training\nsleep 1\nkill -9 $$\n'
RAISED = '#!/bin/bash\necho training\nsleep 3\nexit 1\n'


@pytest.fixture
def script(store, tmp_path):
    """The rendered batch script of a one-node profile with hang_timeout 10 s on a 4-node partition."""
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["profiles"]["n1_gpu1"]["hang_timeout"] = "10s"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    path = rendered_slurm_script(store, tmp_path, str(tmp_path / "c.yaml"), "n1_gpu1")
    (store / "runs" / "long" / "logs").mkdir(parents=True)
    return path


def run(script, tmp_path, rank: str, timeout=60):
    fakes = {"srun": SRUN, "scontrol": SCONTROL, "apptainer": rank}
    job = start(script, tmp_path, "0", fakes, CT_HEARTBEAT_S="1")
    out, _ = job.communicate(timeout=timeout)
    return job.returncode, out


def ends(run_dir):
    lines = (run_dir / "logs" / "segments.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if '"event": "end"' in line]


def test_a_hung_rank_is_named_its_stacks_saved_and_the_job_requeued_without_its_node(script, store, tmp_path):
    run_dir = store / "runs" / "long"
    started = time.time()
    rc, out = run(script, tmp_path, HUNG)
    assert rc == 0, out
    assert time.time() - started < 20, out  # found at the first look, 3 s for the stacks, the rank ends on TERM
    assert "error: rank 1 on host nB made no step for 3" in out and "(hang_timeout 10 s)" in out, out
    (end,) = ends(run_dir)
    assert end["how"] == "HANG" and end["stuck"]["rank"] == 1 and end["stuck"]["host"] == "nB", end
    assert end["stuck"]["step"] == 39 and end["stuck"]["silent_s"] >= 30 and end["stacks"] == "logs/hang-1", end
    assert (end["requeued"], end["failures"], end["max_failures"]) == (True, 1, 2), end
    assert end["excluded"] == [{"host": "nB", "why": f"rank 1 made no step for {end['stuck']['silent_s']} s"}]
    assert (tmp_path / "requeued").read_text().split() == ["4242"]
    assert (tmp_path / "updated").read_text().split() == ["update", "JobId=4242", "ExcNodeList=nB"]
    hang = run_dir / "logs" / "hang-1"
    assert (hang / "rank-1.stack").read_text() == "rank 1 frame\n" and (hang / "rank-0.stack").exists()
    assert (run_dir / "logs" / "progress" / "dump").read_text().strip() == str(hang)  # every rank's dump request
    assert segments.read(run_dir)[-1].how == "HANG"


@pytest.mark.slow  # 3-4 s of bash: make test, not make test-fast
def test_a_killed_rank_is_requeued_within_max_failures_fails_past_it_and_a_resume_has_it_afresh(script, store, tmp_path):
    run_dir = store / "runs" / "long"
    rc, out = run(script, tmp_path, KILLED)
    assert rc == 0 and "failure 1 of at most 2 (max_failures): requeueing job 4242" in out, out
    assert not (tmp_path / "updated").exists()  # no node to blame: none left out
    for _ in range(2):
        rc, out = run(script, tmp_path, KILLED)
    assert rc == 137, out
    assert "error: failure 3 of this run, and max_failures is 2: not requeued" in out, out
    assert f"bin/run-cluster resume {run_dir}" in out
    found = [(e["how"], e["exit_code"], e["failures"], e["requeued"]) for e in ends(run_dir)]
    assert found == [("FAILED", 137, 1, True), ("FAILED", 137, 2, True), ("FAILED", 137, 3, False)], found
    assert (tmp_path / "requeued").read_text().split() == ["4242", "4242"]
    rc, out = run(script, tmp_path, KILLED)  # `resume` after the budget stopped it: max_failures afresh
    assert rc == 0 and "failure 1 of at most 2 (max_failures)" in out, out


@pytest.mark.slow  # 3-4 s of bash: make test, not make test-fast
def test_an_exception_is_not_requeued_and_an_earlier_segments_progress_is_no_hang(script, store, tmp_path):
    run_dir = store / "runs" / "long"
    progress = run_dir / "logs" / "progress"
    progress.mkdir(parents=True)
    old = int(time.time()) - 100
    (progress / "rank-0").write_text(f"40 {old} {old} 0.100 nA 11\n")  # silent for 100 s: of the last segment
    rc, out = run(script, tmp_path, RAISED)
    assert rc == 1 and "made no step" not in out, out
    (end,) = ends(run_dir)
    assert end["how"] == "FAILED" and "failures" not in end and not (tmp_path / "requeued").exists()


@pytest.mark.parametrize("value, seconds", [("auto", 0), (90, 90), ("90s", 90), ("10m", 600), ("1h", 3600)])
def test_hang_timeout_reads_seconds_and_units(value, seconds):
    assert fields.duration_s(value, "p: hang_timeout") == seconds


@pytest.mark.parametrize("value, said", [("5", "is 5 s, shorter than 10 s"), ("ten", "is not a duration"),
                                         (1.5, "is not a duration"), (True, "is not a duration")])
def test_a_bad_hang_timeout_is_refused_in_one_line(value, said):
    with pytest.raises(UserError, match=said) as refused:
        fields.duration_s(value, "p: hang_timeout")
    assert "\n" not in str(refused.value) and "auto" in str(refused.value)


# a node failure: Slurm has requeued the job (Restarts went up) and marks nB down; the job is pending again
NODE_DOWN = ('#!/bin/bash\ncase "$1 $2" in\n  "show job") echo "JobId=4242 JobState=PENDING Restarts=1" ;;\n'
             '  "show node") echo "NodeName=nA Arch=x86_64 State=IDLE"\n'
             '    echo "NodeName=nB Arch=x86_64 State=DOWN+NOT_RESPONDING Reason=gone" ;;\n'
             '  update*) echo "$*" >> "$CT_FAKE_DIR/updated" ;;\nesac\n')


@pytest.mark.parametrize("sinfo, srun_said, why", [
    ('echo "nB|gone"', "", "the node failed under segment 1: gone"),  # still down: sinfo names it, and its reason
    ("true", "srun: error: Node failure on nB", "the node failed under segment 1")])  # back at once: srun saw it
def test_a_failed_node_is_named_and_left_out_of_the_job_slurm_requeued(script, store, tmp_path, sinfo, srun_said, why):
    srun = SRUN.replace("\n", f'\necho "{srun_said}" >&2\n', 1)  # srun's own line, before the step's
    fakes = {"srun": srun, "scontrol": NODE_DOWN,
             "sinfo": f"#!/bin/bash\n{sinfo}\n", "apptainer": "#!/bin/bash\necho training\n"}
    job = start(script, tmp_path, "0", fakes, CT_HEARTBEAT_S="1", SLURM_JOB_NODELIST="nA,nB")
    out, _ = job.communicate(timeout=60)
    (end,) = ends(store / "runs" / "long")
    assert end["how"] == "NODE_FAIL" and (end["requeued"], end["failures"]) == (True, 1), (end, out)
    assert end["failed_nodes"] == ["nB"] and end["excluded"] == [{"host": "nB", "why": why}], end
    assert (tmp_path / "updated").read_text().split() == ["update", "JobId=4242", "ExcNodeList=nB"]


def test_a_node_whose_driver_check_fails_is_left_out_of_the_requeued_job(store, tmp_path):
    """The start-of-job node check (the NVIDIA driver the image needs) fails on the batch host: a failure of the
    node, not of the run: requeued without it."""
    script = rendered_slurm_script(store, tmp_path, "gilbreth", "n2_gpu1")
    (store / "runs" / "long" / "logs").mkdir(parents=True)
    fakes = {"srun": SRUN, "scontrol": SCONTROL, "nvidia-smi": "#!/bin/bash\necho 400.00\n",
             "apptainer": "#!/bin/bash\necho training\n"}
    job = start(script, tmp_path, "0", fakes, SLURM_JOB_NODELIST="nA,nB", SLURM_JOB_NUM_NODES="2")
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 0 and "older than the 525.60.13" in out and "training" not in out, out
    (end,) = ends(store / "runs" / "long")
    host = socket.gethostname()
    assert (end["how"], end["requeued"], end["failures"]) == ("FAILED", True, 1), end
    assert end["excluded"] == [{"host": host, "why": "its NVIDIA driver 400.00 is older than 525.60.13"}], end
    assert (tmp_path / "updated").read_text().split() == ["update", "JobId=4242", f"ExcNodeList={host}"]


# both "ranks" beat on at the same step: each waits for the other (a collective that never completes)
BOTH_WAIT = ('#!/bin/bash\nd="$CT_RUN_DIR/logs/progress"; mkdir -p "$d"; trap "exit 143" TERM\necho "training"\n'
             'while :; do now=$(date +%s); for r in 0 1; do echo "40 $((now - 30)) $now 0.100 n$r 1$r" > "$d/rank-$r"; '
             'done; sleep 0.3; done\n')


@pytest.mark.slow  # 5 s of bash: make test, not make test-fast
def test_ranks_that_all_wait_at_one_step_are_a_hang_whose_rank_cannot_be_told(script, store, tmp_path):
    rc, out = run(script, tmp_path, BOTH_WAIT)
    assert rc == 0 and "which one is stuck cannot be told; naming rank 0" in out, out
    (end,) = ends(store / "runs" / "long")
    assert end["how"] == "HANG" and end["stuck"]["rank"] == 0 and "excluded" not in end, end  # no node to blame


@pytest.mark.slow  # 5 s of bash: make test, not make test-fast
def test_a_node_the_partition_cannot_spare_is_not_left_out(store, tmp_path):
    """A 1-node job on a 1-node partition: leaving its node out would leave the job nowhere to run."""
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["partitions"]["ci"]["nodes"] = 1
    cluster["profiles"]["n1_gpu1"]["hang_timeout"] = 10
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    script = rendered_slurm_script(store, tmp_path, str(tmp_path / "c.yaml"), "n1_gpu1")
    (store / "runs" / "long" / "logs").mkdir(parents=True)
    rc, out = run(script, tmp_path, HUNG)
    assert rc == 0 and "warning: node nB is not left out: the partition has 0 node(s) beyond the job's 1" in out, out
    (end,) = ends(store / "runs" / "long")
    assert end["how"] == "HANG" and end["requeued"] and "excluded" not in end, end
    assert not (tmp_path / "updated").exists() and (tmp_path / "requeued").read_text().split() == ["4242"]


# srun's stderr: a rank's own line, then srun's, then srun ends as when it saw a rank killed
SRUN_SAW_A_KILL = ('#!/bin/bash\necho "a rank\'s warning" >&2\necho "srun: error: nB: task 1: Killed" >&2\n'
                   'exit 137\n')


def test_srun_s_own_lines_are_kept_whole_before_the_shell_reads_them(script, store, tmp_path):
    """logs/srun-N.log holds srun's lines alone, and its last is there when the shell names the rank that died,
    however late the copy writes it (a tee that starts late, as under load); the job log has every line once."""
    late_tee = f'#!/bin/bash\nsleep 1\nexec {shutil.which("tee")} "$@"\n'
    fakes = {"srun": SRUN_SAW_A_KILL, "scontrol": SCONTROL, "tee": late_tee}
    job = start(script, tmp_path, "0", fakes, CT_HEARTBEAT_S="1")
    out, _ = job.communicate(timeout=60)
    run_dir = store / "runs" / "long"
    (end,) = ends(run_dir)
    assert end["how"] == "FAILED" and end["died"] == {"rank": 1, "host": "nB"}, (end, out)
    assert (run_dir / "logs" / "srun-1.log").read_text() == "srun: error: nB: task 1: Killed\n"
    assert out.count("a rank's warning") == 1 and out.count("srun: error: nB: task 1: Killed") == 1, out


# srun as a cancel finds it: it passes the TERM on to the ranks, which save, and writes on meanwhile
SRUN_SAVING = ('#!/bin/bash\ntrap \'for i in 1 2 3; do echo "saving $i" >&2; sleep 0.2; done; '
               'echo "srun: error: nB: task 1: Terminated" >&2; exit 143\' TERM\n'
               'echo training >&2\nwhile :; do sleep 0.1; done\n')


@pytest.mark.slow  # 3 s of bash: make test, not make test-fast
def test_a_cancels_term_does_not_end_the_copy_of_sruns_stderr(script, store, tmp_path, monkeypatch):
    """scancel signals the whole batch step, the copy of srun's stderr too: it ignores the TERM, so that what srun
    writes while the ranks save still reaches the job log (a closed pipe would end srun mid-save)."""
    monkeypatch.setattr(subprocess, "Popen", functools.partial(subprocess.Popen, start_new_session=True))
    job = start(script, tmp_path, "0", {"srun": SRUN_SAVING, "scontrol": SCONTROL}, CT_HEARTBEAT_S="1")
    for line in job.stdout:
        if line.startswith("training"):
            break
    os.killpg(job.pid, signal.SIGTERM)  # the batch step's every process, as slurmstepd signals it
    out, _ = job.communicate(timeout=60)
    assert "saving 3" in out and "srun: error: nB: task 1: Terminated" in out, out
    assert ends(store / "runs" / "long")[-1]["how"] == "TERMINATED"
