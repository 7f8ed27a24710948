"""The wait for an interactive allocation (cluster_train/host/interactive/waiting.py): one line per change of the
pending reason or start estimate, the running state returned, an early end refused, Ctrl-C withdrawing the request;
Slurm's StartTime read as the estimate."""
import pytest

from cluster_train.shared.errors import UserError
from cluster_train.host.interactive.waiting import wait_until_running
from cluster_train.host.schedulers import State
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


def test_ctrl_c_withdraws_the_request():
    scheduler = Scripted(pending("Resources"), KeyboardInterrupt())
    with pytest.raises(UserError, match="job 9 withdrawn; nothing is allocated"):
        wait_until_running(scheduler, "9", lambda line: None, poll_s=0)
    assert scheduler.cancelled == ["9"]


@pytest.mark.parametrize("start_time, estimate", [("2026-11-27T16:40:12", "2026-11-27T16:40"), ("Unknown", ""),
                                                  ("N/A", ""), ("None", "")])
def test_slurm_reads_start_time_as_the_estimate(start_time, estimate):
    state = Slurm().live({"JobState": "PENDING", "Reason": "Resources", "StartTime": start_time})
    assert (state["reason"], state["start"]) == ("Resources", estimate)
    assert Slurm().live({"JobState": "RUNNING", "StartTime": start_time})["start"] == ""
