"""How an interactive session's run ended (cluster_train/host/runs/ending.py): its command's exit status where the
scheduler's end is the session's own release of its allocation (interactive/allocation.py), the scheduler's word for
its time limit and for a cancel the release did not make. With test_end_states.py's fakes."""
from pathlib import Path

import pytest

from cluster_train.host.interactive import allocation
from cluster_train.host.runs import ending
from cluster_train.host.scheduling.facts import State

from host.test_end_states import FORGOTTEN, SACCT_CANCELLED, Scheduler, cancel, record


class Releasing(Scheduler):
    """A session's allocation: running until cancelled, then as the scheduler and its accounting say once it has."""

    def cancel(self, job_id, run_dir=None):
        super().cancel(job_id, run_dir)
        self.live, self.said = {"state": State.CANCELLED}, SACCT_CANCELLED  # scancel, by the releasing user


def session(run_dir: Path, code: int, scheduler) -> dict:
    """A `run-cluster shell` session's end: its command's exit status recorded, then its allocation released."""
    ending.record_session_end(run_dir, "7", code)
    allocation.release(scheduler, "7", run_dir)
    return ending.run_state(scheduler, "7", run_dir)


@pytest.mark.parametrize("code, expected", [(3, State.FAILED), (0, State.COMPLETED)])
def test_a_session_whose_command_ended_is_its_exit_status_not_its_release(tmp_path, code, expected):
    scheduler = Releasing({"state": State.RUNNING})
    state = session(record(tmp_path, ("start", 1)), code, scheduler)
    assert scheduler.cancelled and scheduler.cancelled[0]["by"] == ending.RELEASE  # released, and said so
    assert state["state"] == expected and state["ended_by"] == f"the shell's command exited {code}", state
    gone = session(record(tmp_path, ("start", 1)), code, Releasing(FORGOTTEN))  # past MinJobAge, no accounting
    assert gone["state"] == expected and gone["source"] == "the run's record", gone


def test_a_session_that_hit_its_time_limit_is_timeout(tmp_path):
    timeout = {"state": State.TIMEOUT, "exit_code": "0:15", "said": "sacct: TIMEOUT"}
    scheduler = Releasing({"state": State.TIMEOUT}, said=timeout)
    state = session(record(tmp_path, ("start", 1)), 143, scheduler)  # srun killed with the allocation
    assert not scheduler.cancelled  # it had ended: nothing to release
    assert state["state"] == State.TIMEOUT and state["ended_by"] == "ended by the scheduler (sacct: TIMEOUT)", state


def test_a_session_cancelled_outside_is_the_accountings_word_and_by_run_cluster_cancel_its(tmp_path):
    outside = Releasing({"state": State.CANCELLED}, said=SACCT_CANCELLED)
    state = session(record(tmp_path, ("start", 1)), 143, outside)
    assert not outside.cancelled and state["state"] == State.CANCELLED, state
    assert state["ended_by"] == "cancelled outside run-cluster (sacct: CANCELLED by uid 0 (root))", state
    cancel(Releasing({"state": State.RUNNING}), record(tmp_path, ("start", 1)))  # run-cluster cancel, then the end
    still = Releasing({"state": State.RUNNING})  # the controller has not acted yet: the release asks again
    state = session(tmp_path, 143, still)
    assert still.cancelled[0].get("by") is None  # the release kept the cancel's own record
    assert state["state"] == State.CANCELLED and state["source"] == "run-cluster cancel", state
    assert state["ended_by"].startswith("cancelled by bin/run-cluster cancel at 20"), state
