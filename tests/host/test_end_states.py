"""How a run ended, and whose word that is (cluster_train/host/runs/ending.py), against schedulers that remember the
job, that have forgotten it and keep accounting, and that keep none; the cause line that names the event, never a rank
that stopped as asked; the adapters' readings of sacct, scontrol and bhist; a closed pipe. No cluster needed: the real
clusters' cases are in tests/cluster/test_runs_cancelled.py."""
import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from cluster_train.shared.errors import UserError
from cluster_train.host.runs import causes, closing, cost, ending, segments
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.views.commands import print_status
from cluster_train.host.schedulers import Lsf, Slurm, State

FORGOTTEN = {"state": State.UNKNOWN, "gone": True}  # scontrol: Invalid job id specified (past MinJobAge)
SACCT_CANCELLED = {"state": State.CANCELLED, "exit_code": "0:0", "nodes": "None assigned",
                   "said": "sacct: CANCELLED by uid 0 (root)"}


class Scheduler:
    """What run_state asks: the scheduler's word on the job now, and its accounting's."""

    name, accounting_name = "slurm", "sacct"

    def __init__(self, live=None, said=None, refuse=None):
        self.live, self.said, self.refuse, self.cancelled = live or FORGOTTEN, said, refuse, []

    def state(self, job_id, run_dir=None):
        return dict(self.live)

    def accounting(self, job_id):
        return self.said

    def cancel(self, job_id, run_dir=None):
        self.cancelled.append(segments.cancel_of(run_dir, job_id))  # what the run said when the scheduler was asked
        if self.refuse:
            raise self.refuse


def record(run_dir: Path, *events) -> Path:
    """logs/segments.jsonl as the batch shell writes it: ("start", n) or ("end", n, how, exit code)."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    lines = [{"event": "start", "segment": e[1], "job_id": "7", "hosts": "n1", "time": "t0"} if e[0] == "start" else
             {"event": "end", "segment": e[1], "how": e[2], "exit_code": e[3], "time": "t1"} for e in events]
    (run_dir / "logs" / "segments.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run_dir


def write_manifest(run_dir: Path, scheduler: str, job_id: str) -> Manifest:
    manifest = {"run_id": "r", "cluster_file": "ci-slurm", "profile": "n1_gpu1", "image": {"sha256": "ab"},
                "scheduler": {"name": scheduler, "job_id": job_id}, "job": {}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return Manifest(manifest)


def cancel(scheduler, run_dir):
    ending.cancel([(run_dir, "7")], lambda: scheduler.cancel("7", run_dir))


# the issue's three ways to a run stuck PENDING or UNKNOWN: cancelled between two requeues, before it started, and
# a sweep's element whose batch shell was killed after KillWait before it recorded its end
CANCELLED_RECORDS = {"between requeues": [("start", 1), ("end", 1, "REQUEUED", 75)], "before start": [],
                     "shell killed": [("start", 1)]}


def test_the_runs_own_record_decides_when_the_scheduler_forgot_and_keeps_no_accounting(tmp_path):
    forgetful = Scheduler()
    forgetful.accounting_name = ""
    for how, expected in (("COMPLETED", State.COMPLETED), ("FAILED", State.FAILED), ("TIMEOUT", State.TIMEOUT)):
        record(tmp_path, ("start", 1), ("end", 1, how, 0))
        with (tmp_path / "logs" / "segments.jsonl").open("a") as f:
            f.write('{"event": "end", "segm')  # a torn last line: the job died mid-write
        assert ending.run_state(forgetful, "7", tmp_path)["state"] == expected
    for events, told in ((CANCELLED_RECORDS["between requeues"], "segment 1 REQUEUED"),
                         ([], "no segment (the job never started)"),
                         ([("start", 1), ("end", 1, "TERMINATED", 143)], "a signal ended its batch shell")):
        state = ending.run_state(forgetful, "7", record(tmp_path, *events))
        assert state["state"] == State.UNKNOWN and state["gone"], state  # ended, and no one can say how: no guess
        assert state["ended_by"].startswith("slurm no longer knows job 7, slurm keeps no accounting, and the run's "
                                            "record ends with ") and told in state["ended_by"], state


@pytest.mark.parametrize("scheduler",
                         [Scheduler({"state": State.CANCELLED}), Scheduler(), Scheduler(said=SACCT_CANCELLED),
                                       Scheduler({"state": State.FAILED})],  # LSF shows a killed job EXIT
                         ids=["remembered", "forgotten", "forgotten-sacct", "lsf-exit"])
@pytest.mark.parametrize("events", CANCELLED_RECORDS.values(), ids=CANCELLED_RECORDS)
def test_a_run_cancelled_by_run_cluster_ends_cancelled_however_far_its_job_got(tmp_path, scheduler, events):
    run_dir = record(tmp_path, *events)
    cancel(Scheduler({"state": State.RUNNING}), run_dir)
    state = ending.run_state(scheduler, "7", run_dir)
    assert state["state"] == State.CANCELLED and state["source"] == "run-cluster cancel", state
    assert state["ended_by"].startswith("cancelled by bin/run-cluster cancel at 20"), state
    assert ending.EndWatch(scheduler, "7", run_dir).poll() == state  # --wait, logs --follow: ended


def test_cancel_records_itself_before_asking_the_scheduler_and_not_when_refused(tmp_path):
    record(tmp_path)
    running = Scheduler({"state": State.RUNNING}, refuse=UserError("scancel failed: Access/permission denied"))
    with pytest.raises(UserError):
        cancel(running, tmp_path)
    assert running.cancelled[0]["job_id"] == "7"  # the record was there when the scheduler was asked
    refused = json.loads((tmp_path / segments.CANCELLED).read_text())
    assert refused["refused"] == "scancel failed: Access/permission denied"
    assert ending.run_state(Scheduler({"state": State.FAILED}), "7", tmp_path)["state"] == State.FAILED
    interrupted = Scheduler({"state": State.RUNNING}, refuse=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        cancel(interrupted, tmp_path)
    assert segments.cancel_of(tmp_path, "7") is None  # never reached the scheduler: no cancel
    cancel(Scheduler({"state": State.RUNNING}), tmp_path)
    assert segments.cancel_of(tmp_path, "8") is None  # a resumed run's next job is not the cancelled one


def test_a_job_that_completed_before_the_cancel_reached_it_stays_completed(tmp_path):
    run_dir = record(tmp_path, ("start", 1), ("end", 1, "COMPLETED", 0))
    cancel(Scheduler({"state": State.RUNNING}), run_dir)
    for scheduler in (Scheduler({"state": State.COMPLETED}), Scheduler(said=SACCT_CANCELLED)):
        assert ending.run_state(scheduler, "7", run_dir)["state"] == State.COMPLETED


@pytest.mark.parametrize("events", CANCELLED_RECORDS.values(), ids=CANCELLED_RECORDS)
def test_a_cancel_outside_run_cluster_is_the_accountings_word(tmp_path, events):
    run_dir = record(tmp_path, *events)
    for scheduler in (Scheduler(said=SACCT_CANCELLED), Scheduler({"state": State.CANCELLED}, said=SACCT_CANCELLED)):
        state = ending.run_state(scheduler, "7", run_dir)
        assert state["state"] == State.CANCELLED and state["source"] == "sacct", state
        assert state["ended_by"] == "cancelled outside run-cluster (sacct: CANCELLED by uid 0 (root))"
    no_accounting = ending.run_state(Scheduler({"state": State.CANCELLED}), "7", run_dir)
    assert no_accounting["ended_by"] == "cancelled outside run-cluster (slurm: CANCELLED)", no_accounting


def test_the_accounting_names_what_the_scheduler_ended_and_the_run_keeps_its_own_timeout(tmp_path):
    node_fail = {"state": State.NODE_FAIL, "said": "sacct: NODE_FAIL"}
    state = ending.run_state(Scheduler(said=node_fail), "7", record(tmp_path, ("start", 1)))
    assert state["state"] == State.NODE_FAIL and state["ended_by"] == "ended by the scheduler (sacct: NODE_FAIL)"
    run_dir = record(tmp_path, ("start", 1), ("end", 1, "TIMEOUT", 75))  # every requeue used: the job exits 75
    failed = {"state": State.FAILED, "exit_code": "75:0", "said": "sacct: FAILED"}
    assert ending.run_state(Scheduler({"state": State.FAILED}, said=failed), "7", run_dir)["state"] == State.TIMEOUT
    lagging = {"state": State.RUNNING, "said": "sacct: RUNNING"}  # slurmdbd has not heard of the end yet
    assert ending.run_state(Scheduler({"state": State.CANCELLED}, said=lagging), "7", run_dir)["state"] == \
        State.CANCELLED
    unreachable = {"state": State.UNKNOWN, "gone": False}  # scontrol could not ask the controller; sacct could
    assert ending.run_state(Scheduler(unreachable, said=lagging), "7", run_dir)["state"] == State.RUNNING


def test_no_wait_lasts_for_ever_on_a_job_the_scheduler_ended(tmp_path, monkeypatch):
    """Forgotten with no end on record anywhere: the wait gives the accounting GONE_WAIT_S, then stops and says so;
    a scheduler that cannot be asked is waited for."""
    monkeypatch.setattr(ending, "GONE_WAIT_S", 0.3)
    run_dir = record(tmp_path, *CANCELLED_RECORDS["between requeues"])
    watch = ending.EndWatch(Scheduler(), "7", run_dir)
    assert watch.poll() is None
    time.sleep(0.4)
    state = watch.poll()
    assert state["state"] == State.UNKNOWN and state["ended_by"].endswith("; stopped waiting after 0.3 s"), state
    unreachable = ending.EndWatch(Scheduler({"state": State.UNKNOWN, "gone": False}), "7", run_dir)
    assert unreachable.poll() is None and (time.sleep(0.4) or unreachable.poll() is None)


def run_dir_with_log(tmp_path: Path, log: str) -> Path:
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "logs" / "job-7.out").write_text(log)
    write_manifest(tmp_path, "slurm", "7")
    return tmp_path


def test_status_names_the_cancel_not_the_ranks_that_saved_and_stopped_as_asked(tmp_path, capsys):
    log = ("[cluster-train] stop requested (SIGTERM): saved last.ckpt at step 40 (epoch 2); exiting 75\n"
           "srun: error: n1: task 0: Exited with exit code 75\nslurmstepd: error: *** JOB 7 CANCELLED ***\n")
    run_dir = run_dir_with_log(tmp_path, log)
    assert causes.diagnose(run_dir) is None  # 75: saved and stopped as asked, no death
    for scheduler, cause in ((Scheduler({"state": State.CANCELLED}, said=SACCT_CANCELLED),
                              "cause: cancelled outside run-cluster (sacct: CANCELLED by uid 0 (root))"),
                             (Scheduler(), "cause: cancelled by bin/run-cluster cancel at 20")):
        if "bin/run-cluster" in cause:
            cancel(Scheduler({"state": State.RUNNING}), run_dir)
        print_status(Manifest.read(run_dir), scheduler, run_dir)
        out = capsys.readouterr().out
        assert "r: slurm job 7 CANCELLED" in out and cause in out and "died" not in out, out


def test_the_cause_of_a_failure_is_named_from_the_logs(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "job-1.out").write_text("epoch 1\nsrun: error: n2: task 1: Killed\n")
    assert causes.diagnose(tmp_path) == "rank 1 died on host n2; its log lines above say why"
    (logs / "job-1.out").write_text("srun: error: n1: task 1: Exited with exit code 75\n"  # saved as asked
                                    "srun: error: n2: task 0: Exited with exit code 1\n")
    assert causes.diagnose(tmp_path) == "rank 0 died on host n2; its log lines above say why"
    (logs / "job-1.err").write_text("[cluster-train] error: loss became nan at step 12 (epoch 1); last good ...\n")
    assert causes.diagnose(tmp_path).startswith("[cluster-train] error: loss became nan at step 12")
    (logs / "job-1.err").write_text("slurmstepd: error: Detected 1 oom-kill event(s)\n")
    assert "data.num_workers" in causes.diagnose(tmp_path)


def test_epochs_are_shown_counted_from_1_as_the_job_log_counts_them(tmp_path):
    """The training records Lightning's current_epoch (from 0); the log says 'saved ... step 133 (epoch 3)'."""
    run_dir = record(tmp_path, ("start", 1), ("end", 1, "REQUEUED", 75), ("start", 2))
    with (run_dir / "logs" / "segments.jsonl").open("a") as f:
        f.write(json.dumps({"event": "train_start", "segment": 2, "output_dir": "o", "resumed_epoch": 2,
                            "resumed_step": 133}) + "\n")
    assert segments.read(run_dir)[1].line().endswith("resumed from epoch 3 step 133")
    assert segments.as_records(run_dir)[1]["resumed_from"] == [{"output_dir": "o", "epoch": 3, "step": 133}]


# ---- the adapters' readings of their schedulers' words (stand-in commands on PATH) --------------------------------

def fake_commands(tmp_path, monkeypatch, **scripts):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{text}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_slurm_reads_sacct_for_a_job_and_for_an_array_element_that_never_started(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, sacct='case "$*" in *" -j 9 "*) printf "9_0|CANCELLED by 0|0:15|n1\\n'
                                               '9_[1-3,5%%2]|CANCELLED by 0|0:0|None assigned\\n";; '
                                               '*" -j 7 "*) echo "7|NODE_FAIL|0:0|n2";; esac')
    slurm = Slurm()
    assert slurm.accounting("7") == {"state": State.NODE_FAIL, "exit_code": "0:0", "nodes": "n2",
                                     "said": "sacct: NODE_FAIL"}
    for job_id, nodes in (("9_0", "n1"), ("9_2", "None assigned"), ("9_5", "None assigned")):
        said = slurm.accounting(job_id)
        assert said["state"] == State.CANCELLED and said["nodes"] == nodes, (job_id, said)
        assert said["said"].startswith("sacct: CANCELLED by uid 0"), said
    assert slurm.accounting("9_4") is None and slurm.accounting("8") is None


def test_a_sweeps_status_asks_slurm_once_for_the_whole_array(tmp_path, monkeypatch):
    """One scontrol (the elements not started yet are one line) and one sacct answer every element."""
    fake_commands(tmp_path, monkeypatch,
                  scontrol='echo call >> "$CALLS"; printf "JobId=10 ArrayJobId=9 ArrayTaskId=0 JobState=RUNNING '
                           'ExitCode=0:0 NodeList=n1\\nJobId=9 ArrayJobId=9 ArrayTaskId=2-4%%2 JobState=PENDING '
                           'Reason=JobArrayTaskLimit ExitCode=0:0 NodeList=\\n"',
                  sacct='echo call >> "$CALLS"; printf "9_1|CANCELLED by 0|0:15|n2\\n"')
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    from cluster_train.host.runs.sweep_state import ArrayView

    view = ArrayView(Slurm(), {"array_job_id": "9", "elements": [{"job_id": f"9_{i}"} for i in range(6)]})
    assert [view.state(f"9_{i}")["state"] for i in range(6)] == [
        State.RUNNING, State.UNKNOWN, State.PENDING, State.PENDING, State.PENDING, State.UNKNOWN]
    assert view.state("9_3")["reason"] == "JobArrayTaskLimit" and view.state("9_1")["gone"]
    assert view.accounting("9_1")["said"].startswith("sacct: CANCELLED") and view.accounting("9_5") is None
    assert (tmp_path / "calls").read_text().count("call") == 2


def test_slurm_tells_a_forgotten_job_from_a_controller_that_does_not_answer(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, scontrol='echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    assert Slurm().state("7") == {"state": State.UNKNOWN, "gone": True}
    fake_commands(tmp_path, monkeypatch, scontrol='echo "Unable to contact slurm controller (connect failure)" >&2; '
                                                  'exit 1')
    assert Slurm().state("7") == {"state": State.UNKNOWN, "gone": False}
    fake_commands(tmp_path, monkeypatch, scontrol='echo "JobId=7 JobState=COMPLETING ExitCode=0:15 NodeList=n1"')
    assert Slurm().state("7")["state"] == State.RUNNING  # a cancelled job still ending on its node


def test_lsf_reads_bhist_once_bjobs_has_forgotten_the_job(tmp_path, monkeypatch):
    """The LSF stand-in with a CLEAN_PERIOD of 3 s (long enough for a loaded machine's bjobs to see the job EXIT):
    bjobs forgets a killed job, bhist still says who killed it."""
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'lsf'}:{os.environ['PATH']}")
    monkeypatch.setenv("CT_LSF_STATE", str(tmp_path / "lsf"))
    monkeypatch.setenv("CT_LSF_CLEAN_PERIOD", "3")
    done = subprocess.run(["bsub"], input="#!/bin/bash\n#BSUB -q ci\nsleep 30\n", capture_output=True, text=True)
    job_id = done.stdout.split("<")[1].split(">")[0]
    lsf = Lsf()
    deadline = time.time() + 30
    while lsf.state(job_id)["state"] != State.RUNNING:
        assert time.time() < deadline, lsf.state(job_id)
        time.sleep(0.1)
    assert lsf.accounting(job_id)["state"] == State.RUNNING
    subprocess.run(["bkill", job_id], check=True, capture_output=True)
    while lsf.state(job_id)["state"] != State.FAILED:  # bjobs: EXIT, as LSF shows a killed job
        assert time.time() < deadline, lsf.state(job_id)
        time.sleep(0.1)
    while not lsf.state(job_id).get("gone"):  # CLEAN_PERIOD later, bjobs no longer knows it
        assert time.time() < deadline, lsf.state(job_id)
        time.sleep(0.2)
    shown = subprocess.run(["bjobs", "-a"], capture_output=True, text=True).stdout
    assert job_id not in shown, shown
    said = lsf.accounting(job_id)
    assert said["state"] == State.CANCELLED, said
    assert said["said"] == f"bhist: TERM_OWNER: job killed by owner, KILL requested by {getpass.getuser()}"
    (run,) = lsf.allocations(job_id)  # the run's times and end, from bhist's events: a segment's end (issue 55)
    assert run["state"] == "CANCELLED" and run["submit"] <= run["start"] <= run["end"] <= time.time() + 1, run
    assert isinstance(run["exit_code"], int) and "TERM_OWNER" in run["said"], run


def test_lsf_reads_a_requeued_job_bkill_ended_while_it_pended_as_cancelled(tmp_path, monkeypatch):
    """A job that requeued itself by its exit value and was then killed pending: bhist ends its record with `Exited;
    TERM_OWNER`, also where the kill was asked between its shell's exit and the requeue (the CI's order, made here
    by moving the kill's event to where that race put it)."""
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'lsf'}:{os.environ['PATH']}")
    monkeypatch.setenv("CT_LSF_STATE", str(tmp_path / "lsf"))
    monkeypatch.setenv("CT_LSF_REQUEUE_DELAY", "600")
    done = subprocess.run(["bsub"], input='#!/bin/bash\n#BSUB -q ci\n#BSUB -Q "3"\nexit 3\n', capture_output=True,
                          text=True)
    job_id = done.stdout.split("<")[1].split(">")[0]
    history = tmp_path / "lsf" / job_id / "history.jsonl"
    deadline = time.time() + 30
    while '"requeued"' not in history.read_text():
        assert time.time() < deadline, history.read_text()
        time.sleep(0.1)
    subprocess.run(["bkill", job_id], check=True, capture_output=True)
    while '"finish"' not in history.read_text():
        assert time.time() < deadline, history.read_text()
        time.sleep(0.1)
    events = [json.loads(line) for line in history.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[-3:] == ["requeued", "kill_request", "finish"], kinds
    by_kind = {e["event"]: e for e in events}
    raced = events[:kinds.index("end")] + [by_kind[k] for k in ("kill_request", "end", "requeued", "finish")]
    for order in (events, raced):
        history.write_text("".join(json.dumps(e) + "\n" for e in order))
        said = Lsf().accounting(job_id)
        assert said["state"] == State.CANCELLED, (said, [e["event"] for e in order])
        assert said["said"] == f"bhist: TERM_OWNER: job killed by owner, KILL requested by {getpass.getuser()}"


# bhist -l of a job bkill ended and of one a memory limit ended, in IBM's words ("Termination reasons displayed by bacct,
# bhist, and bjobs": "Exited by signal 2. The CPU time used is 0.1 seconds;"), the second with no exit line before its
# `Completed <exit>`
BHIST_SIGNALLED = """Job <5>, User <user2>, Project <default>, Command <sleep 100>
Thu Mar 13 17:30:00: Submitted from host <hostA>, to Queue <normal>, CWD <$HOME>;
Thu Mar 13 17:30:01: Dispatched 1 Task(s) on Host(s) <hostB>, Allocated 1 Slot(s) on Host(s) <hostB>;
Thu Mar 13 17:30:01: Starting (Pid 1234);
Thu Mar 13 17:32:05: Signal <KILL> requested by user or administrator <user2>;
Thu Mar 13 17:32:06: Exited by signal 2. The CPU time used is 0.1 seconds;
Thu Mar 13 17:32:06: Completed <exit>; TERM_OWNER: job killed by owner;
"""
BHIST_MEMLIMIT = """Job <6>, User <user2>, Project <default>, Command <train>
Thu Mar 13 19:20:00: Submitted from host <hostA>, to Queue <normal>, CWD <$HOME>;
Thu Mar 13 19:20:02: Starting (Pid 1240);
Thu Mar 13 19:31:13: Completed <exit>; TERM_MEMLIMIT: job killed after reaching LSF memory usage limit;
"""


def test_lsf_reads_a_run_a_signal_ended_from_bhist_in_ibms_words(tmp_path, monkeypatch):
    """A killed job's run ends where bhist says `Exited by signal 2` (exit 130, as LSF reports it), or at its
    `Completed <exit>`: not `not in the accounting yet` for ever."""
    from cluster_train.host.schedulers.lsf_history import seconds

    fake_commands(tmp_path, monkeypatch, bhist=f'case "$*" in *" 5") cat <<"EOF"\n{BHIST_SIGNALLED}EOF\n;; '
                                               f'*" 6") cat <<"EOF"\n{BHIST_MEMLIMIT}EOF\n;; *) exit 255;; esac')
    (killed,) = Lsf().allocations("5")
    assert killed == {"submit": seconds("Mar 13 17:30:00", ""), "eligible": seconds("Mar 13 17:30:00", ""),
                      "start": seconds("Mar 13 17:30:01", ""), "end": seconds("Mar 13 17:32:06", ""),
                      "state": "CANCELLED", "exit_code": 130,
                      "said": "bhist: Exited by signal 2; TERM_OWNER: job killed by owner"}, killed
    said = Lsf().accounting("5")
    assert (said["state"], said["exit_code"]) == (State.CANCELLED, "130"), said
    (limited,) = Lsf().allocations("6")
    assert limited["end"] == seconds("Mar 13 19:31:13", "") and limited["exit_code"] is None, limited
    assert limited["said"] == "bhist: TERM_MEMLIMIT: job killed after reaching LSF memory usage limit", limited


# ---- a closed pipe --------------------------------------------------------------------------------------------------

def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    """`status ... | head -1` and `logs --follow ... | head -1` of a running job: no traceback, and it returns."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        run_dir = tmp_path / "r"
        (run_dir / "logs").mkdir(parents=True)
        # more than a pipe holds (64 KiB), so that each command writes into the closed pipe
        (run_dir / "logs" / "job.out").write_text("".join(f"line {i}\n" for i in range(20000)))
        record(run_dir, *[("start", n) for n in range(1, 2000)])
        write_manifest(run_dir, "local", str(sleeper.pid))
        for command in ("status", "logs --follow", "logs"):
            done = subprocess.run(f"{sys.executable} {ROOT / 'bin' / 'run-cluster'} {command} {run_dir} | head -1",
                                  shell=True, capture_output=True, text=True, timeout=30)
            assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
            assert done.stdout.startswith(("r: local job", "line 0")), done.stdout
    finally:
        sleeper.kill()
        sleeper.wait()


# ---- every segment closed, one state (issue 55 items 3, 5, 14) ------------------------------------------------------

# sacct of a job cancelled while its batch shell saved for longer than KillWait (SIGKILLed 5 s after the cancel), and
# of a job queued --after another (Eligible once the other completed), as the test cluster printed them
SACCT_KILLED = ("21|CANCELLED by 0|0:0|2026-12-02T00:02:46|2026-12-02T00:02:46|2026-12-02T00:02:47|"
                "2026-12-02T00:02:50\n21.batch|CANCELLED|0:9|2026-12-02T00:02:47|2026-12-02T00:02:47|2026-12-02T00:02:47|"
                "2026-12-02T00:02:55\n")
SACCT_AFTER = ("23|COMPLETED|0:0|2026-12-02T00:02:46|2026-12-02T00:02:55|2026-12-02T00:02:58|2026-12-02T00:03:03\n"
               "23.batch|COMPLETED|0:0|2026-12-02T00:02:58|2026-12-02T00:02:58|2026-12-02T00:02:58|"
               "2026-12-02T00:03:03\n")


def local(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def test_slurm_reads_each_allocation_and_its_batch_shells_end_from_sacct(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, sacct=f'case "$*" in *"-j 21 "*) printf "{SACCT_KILLED}";; esac')
    (killed,) = Slurm().allocations("21")
    assert killed == {"submit": local("2026-12-02T00:02:46"), "eligible": local("2026-12-02T00:02:46"),
                      "start": local("2026-12-02T00:02:47"), "end": local("2026-12-02T00:02:55"),
                      "state": "CANCELLED", "exit_code": 137, "said": "sacct: 21.batch CANCELLED 0:9"}
    assert Slurm().allocations("22") == []


class Accounted(Scheduler):
    """A scheduler whose accounting keeps each allocation (allocations())."""

    def __init__(self, live=None, said=None, held=None):
        super().__init__(live, said)
        self.held = held or []

    def allocations(self, job_id):
        return [dict(a) for a in self.held]


def shell_killed(run_dir: Path, started: str = "2026-12-02T00:02:48") -> dict:
    """A run whose batch shell started and was killed before it recorded its end."""
    (run_dir / "logs").mkdir(parents=True)
    start = {"event": "start", "segment": 1, "job_id": "21", "hosts": "n1",
             "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(local(started)))}
    (run_dir / segments.FILE).write_text(json.dumps(start) + "\n")
    return write_manifest(run_dir, "slurm", "21")


def test_a_segment_whose_batch_shell_the_scheduler_killed_is_closed_from_its_accounting(tmp_path, monkeypatch):
    """`status` of a cancelled run whose batch shell was SIGKILLed after KillWait: not `running RUNNING` beside
    CANCELLED, but the accounting's state, exit and end, recorded once in the run's segments."""
    from cluster_train.host.runs.run_status import status_lines, status_of

    run_dir = tmp_path / "r"
    manifest = shell_killed(run_dir)
    fake_commands(tmp_path, monkeypatch, sacct=f'printf "{SACCT_KILLED}"')
    scheduler = Accounted({"state": State.CANCELLED}, said=SACCT_CANCELLED, held=Slurm().allocations("21"))
    lines = status_lines(status_of(manifest, scheduler, run_dir))
    assert "r: slurm job 21 CANCELLED" in lines[0] and not any("running" in line or "RUNNING" in line
                                                                 for line in lines), lines
    (seg,) = segments.read(run_dir)
    assert (seg.how, seg.exit_code, seg.ended_by) == ("CANCELLED", 137, "sacct: 21.batch CANCELLED 0:9"), seg
    assert seg.end == time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(local("2026-12-02T00:02:55")))
    assert "its end from sacct: 21.batch CANCELLED 0:9" in seg.line(), seg.line()
    status_of(manifest, scheduler, run_dir)
    assert (run_dir / segments.FILE).read_text().count('"end"') == 1  # recorded once


def test_resume_closes_a_killed_segment_from_the_accounting_as_status_does(tmp_path, monkeypatch):
    """A run resumed before anyone asked its status: its killed segment ends as the accounting says (the batch
    step's exit and end), not at the resume's time with no exit."""
    from cluster_train.host.runs import resume

    run_dir = tmp_path / "r"
    manifest = shell_killed(run_dir)
    fake_commands(tmp_path, monkeypatch, sacct=f'printf "{SACCT_KILLED}"')
    scheduler = Accounted({"state": State.CANCELLED}, said=SACCT_CANCELLED, held=Slurm().allocations("21"))
    monkeypatch.setattr(Manifest, "adapter", property(lambda self: scheduler))
    resume.close_last_segment(run_dir, manifest)
    (seg,) = segments.read(run_dir)
    assert (seg.how, seg.exit_code, seg.ended_by) == ("CANCELLED", 137, "sacct: 21.batch CANCELLED 0:9"), seg
    assert seg.end == time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(local("2026-12-02T00:02:55")))


# sacct of SACCT_KILLED's job before slurmdbd had its batch step's end, and of one whose accounting keeps no batch step
SACCT_BATCH_UNENDED = SACCT_KILLED.replace("2026-12-02T00:02:55", "Unknown")
SACCT_NO_BATCH = SACCT_KILLED.split("\n")[0] + "\n"


def test_a_segment_is_closed_from_its_batch_steps_end_not_the_allocations_while_that_is_unknown(tmp_path, monkeypatch):
    """The allocation's end while the batch step's End is Unknown would close the segment, and the batch shell's own
    end record could follow it: two ends. Without a batch step the allocation's end and state close it."""
    from cluster_train.host.runs.run_status import status_of

    run_dir = tmp_path / "r"
    manifest = shell_killed(run_dir)
    fake_commands(tmp_path, monkeypatch, sacct=f'printf "{SACCT_BATCH_UNENDED}"')
    (held,) = Slurm().allocations("21")
    assert held["end"] is None and held["exit_code"] == 137, held
    status_of(manifest, Accounted({"state": State.CANCELLED}, said=SACCT_CANCELLED, held=[held]), run_dir)
    assert segments.read(run_dir)[0].how == "" and '"end"' not in (run_dir / segments.FILE).read_text()
    fake_commands(tmp_path, monkeypatch, sacct=f'printf "{SACCT_NO_BATCH}"')
    (held,) = Slurm().allocations("21")
    status_of(manifest, Accounted({"state": State.CANCELLED}, said=SACCT_CANCELLED, held=[held]), run_dir)
    (seg,) = segments.read(run_dir)
    assert (seg.how, seg.exit_code, seg.ended_by) == ("CANCELLED", 0, "sacct: 21 CANCELLED by 0 0:0"), seg
    assert seg.end == time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(local("2026-12-02T00:02:50")))


def test_an_ended_runs_segment_says_its_state_until_the_accounting_has_its_end_and_cancelling_while_cancelled(
        tmp_path):
    from cluster_train.host.runs.run_status import status_lines, status_of

    manifest = shell_killed(tmp_path)
    cancel(Scheduler({"state": State.RUNNING}), tmp_path)
    for live, shown in (({"state": State.RUNNING}, "-> cancelling"), ({"state": State.CANCELLED}, "-> ? CANCELLED")):
        lines = status_lines(status_of(Manifest({**manifest, "scheduler": {"name": "slurm", "job_id": "7"}}),
                                       Accounted(live), tmp_path))
        assert f"job 7 {shown.split()[-1]}" in lines[0], lines  # the run's line and its segment: one state
        assert shown in lines[1] and "RUNNING" not in lines[1] and "running" not in lines[1], lines
    assert segments.read(tmp_path)[0].how == ""  # nothing recorded without the accounting's end


def test_queue_waits_are_the_schedulers_own_and_a_dependency_wait_is_shown_apart(tmp_path, monkeypatch):
    """A resumed run's job that started at once waited 0 s, not the time the run spent cancelled; a run queued
    --after another waited 3 s in the queue after 9 s on its dependency."""
    manifest = shell_killed(tmp_path, "2026-12-02T00:02:58")
    fake_commands(tmp_path, monkeypatch, sacct=f'printf "{SACCT_AFTER}"')
    after = Manifest({**manifest, "after": [{"run_id": "a"}]})
    held = closing.run_allocations(Slurm(), after)
    found = segments.read(tmp_path)
    assert cost.queue_waits(after, found, held) == [(3, 9)]
    assert cost.queue_waits(manifest, found, closing.run_allocations(Slurm(), manifest)) == [(3, None)]
    resumed = Manifest({**manifest, "submitted_at": "2026-12-01T23:00:00+0000",
                        "resumes": [{"at": time.strftime("%Y-%m-%dT%H:%M:%S%z",
                                                         time.localtime(local("2026-12-02T00:02:57"))),
                                     "job_id": "21", "previous_job_id": "20"}]})
    assert cost.queue_waits(resumed, found, []) == [(1, None)]  # no accounting: from the resume, not the submission
    line = cost.cost_line(cost.run_cost(after, found, None, tmp_path, held))
    assert "queue wait 3 s (after 9 s waiting on its dependency)" in line, line
