"""Issue 56 item 1 in the batch shell, run for real in bash with stand-ins for srun, scontrol and apptainer (as
test_segments.py does): a warned run is requeued only when it can go on from a save (it exited CT_REQUEUE_EXIT, or
the trainer wrote last.ckpt in the segment); otherwise it ends once, with the cause. A rank's own exit is the
exception srun's worst code hides (kill-on-bad-exit's SIGTERM gives the others 143): recorded as that rank's, not
requeued; on LSF (the batch shell ends the ranks) and on one host (python -m train command) the same already. And
the summary before queueing says whether the command is known to resume."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cluster
from host.test_segments import FAKES, rendered_slurm_script, signal_when_training, start

from cluster_train.host.runs import failures, segments
from cluster_train.shared.exit_codes import REQUEUE

LOOP = "import time\nwhile True:\n    time.sleep(1)\n"  # an unmodified script: no signal handling at all
# apptainer stand-ins: own code that dies of the warning (the loop above), own code that saves and exits REQUEUE
DIES = '#!/bin/bash\necho "training segment $CT_SEGMENT"\nexec sleep 30\n'
SAVES = (f'#!/bin/bash\nsleep 30 & s=$!\ntrap \'echo saved; kill $s; exit {REQUEUE}\' USR1\n'
         'echo "training segment $CT_SEGMENT"\nwait $s\n')
# the trainer, ended by srun while it saved (exit 143), with or without last.ckpt written in this segment
TRAINER = ('#!/bin/bash\necho "training segment $CT_SEGMENT"\nuntil [ -f "$CT_STOP_FILE" ]; do sleep 0.1; done\n'
           'if [ "$CT_FAKE_SAVE" = 1 ]; then mkdir -p "$CT_RUN_DIR/checkpoints"; echo w > "$CT_RUN_DIR/checkpoints/last.ckpt"; fi\n'
           'exit 143\n')
# srun's words where rank 0 raised: it exited 1, srun ended rank 1 (SIGTERM) and exited with the worst code
RAISED_SRUN = ('#!/bin/bash\necho "Traceback (most recent call last): ValueError: bad batch" >&2\n'
               'echo "srun: error: n1: task 0: Exited with exit code 1" >&2\necho "srun: error: n2: task 1: Terminated" >&2\n'
               'exit 143\n')

# srun's words where rank 0 saved and exited REQUEUE at the warning and srun ended rank 1, still exiting (SIGTERM),
# or where rank 1 raised instead (its own exit: no save to go on from)
SAVED_SRUN = ('#!/bin/bash\nsleep 30 & s=$!\ntrap \'kill $s; echo "srun: error: n1: task 0: Exited with exit code '
              f'{REQUEUE}" >&2; echo "srun: error: n2: task 1: $CT_FAKE_OTHER" >&2; exit 143\' USR1\n'
              'echo "training segment $CT_SEGMENT"\nwait $s\n')


def own_code_script(store, tmp_path: Path, profile: str = "n1_gpu1") -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "loop.py").write_text(LOOP)
    done = run_cluster("ci-slurm", profile, "--dry-run", "--run-id", "long", "--", "python", "loop.py", cwd=code)
    assert done.returncode == 0, done.stderr
    assert "resume: not known to resume (no file of its code mentions CT_REQUEUE_EXIT" in done.stdout, done.stdout
    assert "it ends and is not requeued; see docs/how-to/own-code.md#long-runs" in done.stdout
    script = tmp_path / "job.sh"
    script.write_text(done.stdout.split("nothing submitted) ---\n", 1)[1])
    (store / "runs" / "long" / "logs").mkdir(parents=True)
    return script


def warned(script: Path, tmp_path: Path, rank: str, **env):
    job = start(script, tmp_path, "30", {**FAKES, "apptainer": rank}, **env)
    return job, signal_when_training(job)


def test_an_unmodified_script_warned_at_its_limit_ends_once_with_the_cause(store, tmp_path):
    run_dir = store / "runs" / "long"
    job, out = warned(own_code_script(store, tmp_path), tmp_path, DIES)
    assert job.returncode == 138, out  # SIGUSR1's default: the process dies of it
    assert "the script saved no checkpoint: it would start again from scratch" in out, out
    assert "checkpoint saved" not in out and not (tmp_path / "requeued").exists(), out
    (end,) = segments.read(run_dir)
    assert (end.how, end.exit_code, end.saved) == ("TIMEOUT", 138, False), end
    assert failures.cause([end]) == ("the time limit was reached and the script saved no checkpoint: it would start "
                                     "again from scratch (exit 138), so it was not requeued")


def test_own_code_that_saves_and_exits_the_requeue_code_is_requeued(store, tmp_path):
    job, out = warned(own_code_script(store, tmp_path), tmp_path, SAVES)
    assert job.returncode == 0 and "checkpoint saved (REQUEUED); requeueing job 4242" in out, out
    assert (tmp_path / "requeued").read_text().split() == ["4242"]
    assert [s.how for s in segments.read(store / "runs" / "long")] == ["REQUEUED"]


@pytest.mark.parametrize("other, how", [("Terminated", "REQUEUED"), ("Exited with exit code 1", "FAILED")])
def test_own_code_one_rank_saved_and_srun_ended_the_other_is_requeued(store, tmp_path, other, how):
    """kill-on-bad-exit ends the ranks still exiting after one exited 75, and srun exits 143: a save all the same,
    unless another rank failed by its own exit."""
    job = start(own_code_script(store, tmp_path, "n2_gpu1"), tmp_path, "30", {**FAKES, "srun": SAVED_SRUN},
                CT_FAKE_OTHER=other, SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_NUM_NODES="2")
    out = signal_when_training(job)
    (end,) = segments.read(store / "runs" / "long")
    assert end.how == how and (tmp_path / "requeued").exists() == (how == "REQUEUED"), out


@pytest.mark.parametrize("save, how, requeued", [("1", "REQUEUED", True), ("0", "TIMEOUT", False)])
def test_a_registered_task_is_requeued_when_it_saved_in_the_segment_whatever_srun_gave(store, tmp_path, save, how,
                                                                                       requeued):
    script = rendered_slurm_script(store, tmp_path)
    (store / "runs" / "long" / "logs").mkdir(parents=True)
    job, out = warned(script, tmp_path, TRAINER, CT_FAKE_SAVE=save)
    (end,) = segments.read(store / "runs" / "long")
    assert (end.how, end.exit_code) == (how, 143) and (tmp_path / "requeued").exists() == requeued, out
    assert (end.saved is False) == (not requeued), end


def test_a_ranks_exception_is_that_exception_whatever_exit_srun_gave_the_others(store, tmp_path):
    run_dir = store / "runs" / "long"
    job = start(own_code_script(store, tmp_path, "n2_gpu1"), tmp_path, "0", {**FAKES, "srun": RAISED_SRUN},
                SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_NUM_NODES="2")
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 1 and "requeueing" not in out and not (tmp_path / "requeued").exists(), out
    (end,) = segments.read(run_dir)
    assert (end.how, end.exit_code, end.died, end.failures) == ("FAILED", 1, {"rank": 0, "host": "n1"}, None), end
    said = "rank 0 on host n1 exited 1 (its own exit, an exception: not requeued)"
    assert failures.segment_lines(end)[1:] == [f"  {said}"] and failures.cause([end]) == said


@pytest.mark.slow  # 4 s of bash (the batch shell's rank loop): make test, not make test-fast
def test_an_lsf_ranks_exception_is_that_exception_too(store, tmp_path):
    """blaunch: the batch shell ends the other ranks itself and keeps the first one's own exit."""
    script = rendered_slurm_script(store, tmp_path, "ci-lsf", "two_hosts")
    (tmp_path / "hostfile").write_text("hA\nhB\n")
    (store / "runs" / "long" / "logs").mkdir(parents=True)
    fakes = {"blaunch": '#!/bin/bash\nshift 2\nexec "$@"\n', "brequeue": '#!/bin/bash\necho "$1" > "$CT_FAKE_DIR/requeued"\n',
             "apptainer": '#!/bin/bash\nif [ "$CT_GLOBAL_RANK" = 0 ]; then sleep 1; exit 1; fi\nexec sleep 300\n'}
    job = start(script, tmp_path, "0", fakes, LSB_JOBID="77", LSB_DJOB_HOSTFILE=str(tmp_path / "hostfile"),
                LSB_HOSTS="hA hB")
    out, _ = job.communicate(timeout=90)
    assert job.returncode == 1 and not (tmp_path / "requeued").exists(), out
    (end,) = segments.read(store / "runs" / "long")
    assert (end.how, end.exit_code, end.died, end.failures) == ("FAILED", 1, {"rank": 0, "host": "hA"}, None), end


def test_one_hosts_ranks_end_with_the_first_ones_own_exit():
    """python -m train command on one host (local, LSF on one host): rank 0 raises, rank 1 is ended by its SIGTERM."""
    from cluster_train.image.command import wait_all

    procs = [subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(1)"]),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])]
    assert wait_all(procs) == 1 and procs[1].returncode == -15


def test_the_summary_says_own_code_using_the_requeue_contract_is_known_to_resume(store, tmp_path):
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("import pkg.loop\n")
    (code / "pkg" / "loop.py").write_text("from cluster_train.image import resume\n")
    done = run_cluster("ci-slurm", "n1_gpu1", "--dry-run", "--", "python", "train.py", cwd=code)
    assert done.returncode == 0, done.stderr
    assert ("resume: known to resume (pkg/loop.py uses the requeue contract): at its time limit it saves and is "
            "requeued at most 10 time(s)\n") in done.stdout, done.stdout
    local = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd=code)
    assert local.returncode == 0 and "resume:" not in local.stdout, local.stdout  # nothing requeues a local run
