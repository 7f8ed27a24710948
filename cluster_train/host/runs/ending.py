"""How a run's job ended, and whose word that is. Every way a job can end is recorded by someone:

- the scheduler, while it still knows the job (scontrol, bjobs): queued, running, or how it ended;
- the run itself: the batch shell's segment lines (logs/segments.jsonl: COMPLETED, FAILED, TIMEOUT when the shell
  saw its steps end), and `cancel`'s logs/cancelled.json, written before the scheduler is asked;
- the scheduler's accounting (sacct, bhist), which outlives the scheduler's memory and says who ended the job;
- a run it waited on (--after, a pipeline's earlier stage; its manifest's `after`): the scheduler cancels a job whose
  awaited run ended other than COMPLETED, and the cause names that run.

`status`, `logs --follow`, `--wait`, `cancel` and `resume` all read `run_state`, so they agree. A job the scheduler
no longer knows, whose end nobody recorded, has ended all the same (a scheduler never forgets a queued or running
job): waits give the accounting GONE_WAIT_S to catch up and then stop, saying so.
"""
import json
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.runs import causes, segments
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.schedulers import FINISHED, State

# what the batch shell records when it saw its steps end (TERMINATED: a signal ended the shell, from whoever)
RECORDED_ENDS = {"COMPLETED": State.COMPLETED, "FAILED": State.FAILED, "TIMEOUT": State.TIMEOUT}
SESSION_END = Path("logs") / "session_end.json"  # an interactive session's command ended: its exit status
RELEASE = "release"  # a cancel record's `by` when a session released its allocation after its command
GONE_WAIT_S = 30  # slurmdbd hears of a job's end after the controller; a wait gives it this long


def run_state(scheduler, job_id: str, run_dir: Path) -> Dict:
    """{'state': State, 'source': whose word it is, 'ended_by': the event that ended the job where its log cannot
    tell (a cancel, the scheduler's own words), 'gone': the scheduler has no such job, and the scheduler's fields}."""
    live = scheduler.state(job_id, run_dir)
    if live["state"] not in FINISHED and live["state"] != State.UNKNOWN:
        return cancelling(live, run_dir, job_id)  # queued or running: only the scheduler knows
    found = segments.read(run_dir)
    recorded = recorded_end(found[-1]) if found else None
    if State.COMPLETED in (live["state"], recorded):  # it did its work, whatever came after
        return live if live["state"] == State.COMPLETED else from_record(found[-1], recorded)
    own = session_end(run_dir, job_id, found)
    cancel = segments.cancel_of(run_dir, job_id)
    if cancel and not (own and cancel.get("by") == RELEASE):
        return {**live, "state": State.CANCELLED, "source": "run-cluster cancel", "gone": False,
                "ended_by": causes.ended_by("cancel", time=cancel["time"])}
    said = scheduler.accounting(job_id)
    if said and said["state"] not in FINISHED and live["state"] == State.UNKNOWN and not live.get("gone"):
        return {**said, "source": scheduler.accounting_name}  # the scheduler did not answer; its accounting did
    ended = said if said and said["state"] in FINISHED else live if live["state"] in FINISHED else None
    if own and session_decides(ended, cancel):
        return own
    if ended and not record_decides(ended["state"], found):
        return with_cause(ended, said, scheduler, run_dir)
    if recorded:
        return from_record(found[-1], recorded)
    return {**live, "ended_by": unrecorded(scheduler, job_id, found)} if live.get("gone") else live


def record_session_end(run_dir: Path, job_id: str, exit_code: int) -> None:
    """An interactive session's command ended with `exit_code`: written before its allocation is released, since
    the scheduler then records a cancel (Slurm: CANCELLED by the releasing user) where the command ended itself."""
    (Path(run_dir) / SESSION_END).write_text(json.dumps({"job_id": job_id, "exit_code": exit_code,
                                                          "time": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")


def session_end(run_dir: Path, job_id: str, found: List[segments.Segment]) -> Optional[Dict]:
    """How a session's job ended by its command's exit status; None where it is not one whose command ended."""
    try:
        said = json.loads((Path(run_dir) / SESSION_END).read_text())
    except (OSError, ValueError):
        return None
    if said.get("job_id") != job_id:
        return None
    code = int(said["exit_code"])
    return {"state": State.COMPLETED if code == 0 else State.FAILED, "exit_code": str(code),
            "nodes": found[-1].hosts if found else "", "source": "the run's record",
            "ended_by": causes.ended_by("session", code=str(code))}


def session_decides(ended: Optional[Dict], cancel: Optional[Dict]) -> bool:
    """Whether a session's command ended its job: the scheduler's end is the release's own cancel (run-cluster
    cancels the allocation after the command), a FAILED or none at all. Its time limit (TIMEOUT) and a cancel the
    release did not make (`run-cluster cancel`, scancel, bkill) ended the command, whatever its exit status."""
    if ended is None or ended["state"] == State.FAILED:
        return True
    return ended["state"] == State.CANCELLED and cancel is not None and cancel.get("by") == RELEASE


def release(run_dir: Path, job_id: str, ask: Callable[[], None]) -> None:
    """A session's release of its allocation once its command has ended: recorded as the release's cancel, so that
    the command's exit status stays the end. A `run-cluster cancel` that came first keeps its record: it ended the
    session."""
    if segments.cancel_of(run_dir, job_id):
        ask()
        return
    cancel([(run_dir, job_id)], ask, by=RELEASE)


def cancelling(live: Dict, run_dir: Path, job_id: str) -> Dict:
    """A job the scheduler still holds whose cancel it took is being cancelled: its steps are ending (Slurm says
    COMPLETING, or RUNNING until the controller acts), so `status` says so, not RUNNING."""
    cancel = segments.cancel_of(run_dir, job_id)
    return {**live, "cancelling": f"bin/run-cluster cancel at {cancel['time']}"} if cancel else live


def record_decides(said: State, found: List[segments.Segment]) -> bool:
    """Whether the run's record says more than the scheduler's end: a job that ended itself on its time limit with
    every requeue used (the scheduler: FAILED, the record: TIMEOUT), and a run whose restart budget ran out (the
    scheduler: FAILED, NODE_FAIL or a cancel of what the watchdog ended; the record: FAILED, with every failure)."""
    last = found[-1] if found else None
    return last is not None and (last.budget_spent or (said == State.FAILED and last.how == "TIMEOUT"))


def recorded_end(last: segments.Segment) -> Optional[State]:
    """How the run ended by its own record: the batch shell's COMPLETED, FAILED or TIMEOUT, and FAILED for a failure
    beyond the restart budget (a HANG, say, that it did not requeue); None where the record does not end the run."""
    return State.FAILED if last.budget_spent else RECORDED_ENDS.get(last.how)


def from_record(last: segments.Segment, state: State) -> Dict:
    return {"state": state, "exit_code": str(last.exit_code), "nodes": last.hosts, "source": "the run's record"}


def with_cause(ended: Dict, said: Optional[Dict], scheduler, run_dir: Path) -> Dict:
    """The scheduler's end, with the event that ended the job where only the scheduler knows it (a cancel, a run it
    waited on that failed, a node failure, its own time limit); a FAILED job's cause is in its log (causes.py)."""
    words = said["said"] if ended is said else f"{scheduler.name}: {ended['state'].value}"
    state = {**{k: v for k, v in ended.items() if k != "said"},
             "source": scheduler.accounting_name if ended is said else ""}
    if ended["state"] == State.CANCELLED:
        return {**state, "ended_by": waited_cause(run_dir) or causes.ended_by("outside", said=words)}
    return {**state, "ended_by": "" if ended["state"] == State.FAILED else causes.ended_by("scheduler", said=words)}


def waited_cause(run_dir: Path) -> str:
    """A cancelled run that waited on others (--after): the one that ended other than COMPLETED, which is why the
    scheduler ended it; "" where it waited on none or none of them failed."""
    try:
        after = runs.read_manifest(run_dir).after
    except UserError:
        return ""
    return causes.waited_on(after, waited_end)


def waited_end(entry: Dict[str, str]) -> Optional[str]:
    """How the run of a manifest's `after` entry ended (its state's word); None while it has not, or unreadable."""
    run_dir = Path(entry["run_dir"])
    try:
        scheduler = runs.read_manifest(run_dir).adapter
    except UserError:
        return None
    state = run_state(scheduler, entry["job_id"], run_dir)
    return state["state"].value if has_ended(state) else None


def unrecorded(scheduler, job_id: str, found) -> str:
    """Why the state is UNKNOWN although the job has ended: no one recorded how."""
    last = found[-1] if found else None
    record = ("no segment (the job never started)" if last is None
              else f"segment {last.number} unended (its batch shell was killed)" if not last.how
              else f"segment {last.number} {last.how}" + (" (a signal ended its batch shell: a cancel or a time limit)"
                                                          if last.how == "TERMINATED" else ""))
    accounting = (f"{scheduler.accounting_name} has no record of it" if scheduler.accounting_name
                  else f"{scheduler.name} keeps no accounting")
    return causes.ended_by("unrecorded", scheduler=scheduler.name, job_id=job_id, accounting=accounting, record=record)


class EndWatch:
    """A job's state, polled until it ends. A job the scheduler no longer knows and whose end nobody recorded has
    ended too: it is given GONE_WAIT_S for the accounting to catch up, then taken as ended (UNKNOWN)."""

    def __init__(self, scheduler, job_id: str, run_dir: Path):
        self.scheduler, self.job_id, self.run_dir = scheduler, job_id, Path(run_dir)
        self.gone_since: Optional[float] = None
        self.last: Dict = {}  # the state the last poll found

    def poll(self) -> Optional[Dict]:
        """The job's end state once it has ended, else None."""
        state = self.last = run_state(self.scheduler, self.job_id, self.run_dir)
        if state["state"] in FINISHED:
            return state
        if not state.get("gone"):
            self.gone_since = None
            return None
        self.gone_since = self.gone_since or time.time()
        if time.time() - self.gone_since < GONE_WAIT_S:
            return None
        return {**state, "ended_by": f"{state['ended_by']}; stopped waiting after {GONE_WAIT_S} s"}


def describe(state: Dict) -> str:
    """'CANCELLED (cancelled by bin/run-cluster cancel at ...)': the state, and the event that ended it if known."""
    return state["state"].value + (f" ({state['ended_by']})" if state.get("ended_by") else "")


def shown(state: Dict) -> str:
    """The state's word for a person: 'cancelling' for a job being cancelled, else the state."""
    return "cancelling" if state.get("cancelling") else state["state"].value


def has_ended(state: Dict) -> bool:
    """Ended by anyone's word; or no longer known to its scheduler, which never forgets a queued or running job."""
    return state["state"] in FINISHED or bool(state.get("gone"))


def cancel(jobs: List[Tuple[Path, str]], ask: Callable[[], None], by: str = "") -> None:
    """Record the cancel of each (run directory, job id) in its run, then ask the scheduler (`ask`): the record is
    there however the job ends. Each record is marked refused if the scheduler refuses or the asking is interrupted.
    `by`: RELEASE for a session's own release, "" for `run-cluster cancel`."""
    for run_dir, job_id in jobs:
        segments.record_cancel(run_dir, job_id, by)
    try:
        ask()
    except BaseException as err:
        for run_dir, job_id in jobs:
            segments.cancel_refused(run_dir, job_id, str(err) or type(err).__name__)
        raise


def cancel_run(manifest: Manifest, run_dir: Path) -> str:
    """Cancel one run's job unless it has ended, recording the cancel first (`cancel` above); what was done, in a
    line."""
    scheduler, job_id = manifest.adapter, manifest.job_id
    state = run_state(scheduler, job_id, run_dir)
    if has_ended(state):
        return f"{scheduler.name} job {job_id} ({manifest.run_id}) has ended: {describe(state)}; nothing to cancel"
    cancel([(run_dir, job_id)], lambda: scheduler.cancel(job_id, run_dir))
    return f"cancelled {scheduler.name} job {job_id} ({manifest.run_id})"
