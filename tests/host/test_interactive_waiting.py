"""The wait for an interactive allocation (cluster_train/host/interactive/waiting.py): one line per change of the
pending reason or start estimate, the running state returned, an early end refused, Ctrl-C withdrawing the request;
Slurm's StartTime read as the estimate."""
import pytest

from cluster_train.shared.errors import UserError
from cluster_train.host.interactive.waiting import wait_until_running
from cluster_train.host.runs import segments
from cluster_train.host.scheduling.facts import State
from cluster_train.host.schedulers.slurm import Slurm


class Scripted:
    """A scheduler whose state() answers from a list, then raises what the list ends with."""

    def __init__(self, *answers):
        self.answers, self.cancelled = list(answers), []

    def state(self, job_id, run_dir=None):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def cancel(self, job_id, run_dir=None):
        self.cancelled.append(job_id)


def pending(reason, start=""):
    return {"state": State.PENDING, "reason": reason, "start": start}


def test_says_each_change_once_and_returns_the_running_state():
    running = {"state": State.RUNNING, "nodes": "n2"}
    scheduler = Scripted(pending("Priority"), pending("Priority"), pending("Resources", "2026-11-27T16:40"),
                         pending("Resources", "2026-11-27T16:40"), running)
    said = []
    assert wait_until_running(scheduler, "12", said.append, poll_s=0) == running
    assert said == ["[cluster-train] job 12 pending: Priority; no start estimate yet",
                    "[cluster-train] job 12 pending: Resources; expected start 2026-11-27T16:40"]


def test_a_job_that_ends_before_it_runs_is_refused():
    scheduler = Scripted(pending("BeginTime"), {"state": State.CANCELLED, "exit_code": "0:0"})
    with pytest.raises(UserError, match=r"job 7 ended before it ran \(CANCELLED, exit code 0:0\)"):
        wait_until_running(scheduler, "7", lambda line: None, poll_s=0)
    assert not scheduler.cancelled


def test_ctrl_c_withdraws_the_request(tmp_path):
    scheduler = Scripted(pending("Resources"), KeyboardInterrupt())
    (tmp_path / "logs").mkdir()
    with pytest.raises(UserError, match="job 9 withdrawn; nothing is allocated"):
        wait_until_running(scheduler, "9", lambda line: None, poll_s=0, run_dir=tmp_path)
    assert scheduler.cancelled == ["9"]
    assert segments.cancel_of(tmp_path, "9"), "the run's own cancel: its status does not say cancelled outside"


@pytest.mark.parametrize("start_time, estimate", [("2026-11-27T16:40:12", "2026-11-27T16:40"), ("Unknown", ""),
                                                  ("N/A", ""), ("None", "")])
def test_slurm_reads_start_time_as_the_estimate(start_time, estimate):
    state = Slurm().live({"JobState": "PENDING", "Reason": "Resources", "StartTime": start_time})
    assert (state["reason"], state["start"]) == ("Resources", estimate)
    assert Slurm().live({"JobState": "RUNNING", "StartTime": start_time})["start"] == ""


class Named:
    """An LSF-like session: its job is found by name once the scheduler's command has asked for it."""

    def __init__(self, *ids):
        self.ids = list(ids)

    def job_id(self, job):
        return self.ids.pop(0)


def test_bsub_s_wait_is_said_as_a_held_allocation_s_and_ends_when_the_job_runs(tmp_path):
    """allocation.said_pending: the scheduler's own interactive command (bsub -I) waits; its job, once found by
    name, is said pending on each change, and the saying stops once it runs (the command goes on)."""
    import subprocess
    from types import SimpleNamespace

    from cluster_train.host.interactive.allocation import said_pending

    scheduler = Scripted(pending("Job dependency condition not satisfied"),
                         pending("Job dependency condition not satisfied"),
                         pending("New job is waiting for scheduling", "Nov 27 16:40"), {"state": State.RUNNING})
    scheduler.session = Named("", "41")  # not queued yet at the first look
    prepared = SimpleNamespace(scheduler=scheduler, sub=SimpleNamespace(job=None), run_dir=tmp_path)
    said = []
    command = subprocess.Popen(["sleep", "30"])
    try:
        said_pending(prepared, command, said.append, poll_s=0.01)
        assert command.poll() is None  # it returned on RUNNING, not on the command's end
    finally:
        command.kill()
        command.wait()
    assert said == ["[cluster-train] job 41 pending: Job dependency condition not satisfied; no start estimate yet",
                    "[cluster-train] job 41 pending: New job is waiting for scheduling; expected start Nov 27 16:40"]
