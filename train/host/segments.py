"""A run's own record of its allocations (`logs/segments.jsonl`): the batch shell appends a `start` and an `end`
line per segment (first start, each requeue), the training appends `train_start` (the epoch and step it resumed
from). The record outlives the scheduler's memory of the job, so `status`, `logs --follow` and `--wait` never go
blind, and the manifest keeps the run's history."""
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from train.host.schedulers import FINISHED, State

FILE = Path("logs") / "segments.jsonl"
CANCELLED = Path("logs") / "cancelled.json"  # written by `run-cluster cancel` once the scheduler took the cancel
# how the batch shell says a segment ended -> the run's state when the scheduler no longer knows the job
ENDED = {"COMPLETED": State.COMPLETED, "FAILED": State.FAILED, "TIMEOUT": State.TIMEOUT,
         "REQUEUED": State.PENDING, "PREEMPTED": State.PENDING, "TERMINATED": State.CANCELLED}


@dataclass
class Segment:
    number: int
    job_id: str = ""
    hosts: str = ""
    start: str = ""
    end: str = ""
    how: str = ""  # COMPLETED | FAILED | TIMEOUT | REQUEUED | TERMINATED | PREEMPTED; "" while it runs
    exit_code: Optional[int] = None
    resumed: List[Dict] = field(default_factory=list)  # per training process: output_dir, epoch, step

    def line(self) -> str:
        resumed = [f"epoch {r.get('resumed_epoch')} step {r.get('resumed_step')}" for r in self.resumed
                   if r.get("resumed_step") is not None]
        return (f"segment {self.number}: job {self.job_id or '-'} on {self.hosts or '-'}, {self.start or '?'} -> "
                f"{self.end or 'running'} {self.how or 'RUNNING'}"
                + (f" (exit {self.exit_code})" if self.exit_code not in (None, 0) else "")
                + (f", resumed from {resumed[0]}" if resumed else ""))


def read(run_dir: Path) -> List[Segment]:
    """Every segment of the run, in order; a torn last line (a job killed mid-write) is skipped."""
    path = Path(run_dir) / FILE
    segments: Dict[int, Segment] = {}
    if not path.is_file():
        return []
    for text in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(text)
            number = int(event.get("segment") or 0)
        except (ValueError, TypeError, AttributeError):
            continue
        seg = segments.setdefault(number, Segment(number))
        kind = event.get("event")
        if kind == "start":
            seg.job_id, seg.hosts, seg.start = str(event.get("job_id", "")), event.get("hosts", ""), event.get("time", "")
        elif kind == "end":
            seg.end, seg.how, seg.exit_code = event.get("time", ""), event.get("how", ""), event.get("exit_code")
        elif kind == "train_start":
            seg.resumed.append(event)
    return [segments[n] for n in sorted(segments)]


def as_records(run_dir: Path) -> List[Dict]:
    """The segments as the manifest keeps them."""
    return [{"segment": s.number, "job_id": s.job_id, "hosts": s.hosts, "start": s.start, "end": s.end,
             "how": s.how or "RUNNING", "exit_code": s.exit_code,
             "resumed_from": [{k: r.get(k) for k in ("output_dir", "resumed_epoch", "resumed_step")}
                              for r in s.resumed]} for s in read(run_dir)]


def run_state(scheduler, job_id: str, run_dir: Path) -> Dict:
    """The scheduler's state of the job; where it has forgotten the job (or cannot see it), the run's own record;
    CANCELLED for a job `cancel` ended, once it no longer runs."""
    state = scheduler.state(job_id, run_dir)
    if state["state"] == State.UNKNOWN:
        found = read(run_dir)
        if found and found[-1].how:
            last = found[-1]
            state = {"state": ENDED.get(last.how, State.UNKNOWN), "exit_code": str(last.exit_code),
                     "nodes": last.hosts, "source": "the run's record"}
    # A job `cancel` ended is CANCELLED once the scheduler no longer runs it, unless it completed first: LSF shows a
    # killed job as EXIT (FAILED), and a batch shell killed after Slurm's KillWait never records its end, which
    # leaves the run UNKNOWN (or PENDING, if it was waiting to be requeued) once Slurm forgets the job.
    live = state["state"] not in FINISHED and state["state"] != State.UNKNOWN and "source" not in state
    if not live and state["state"] != State.COMPLETED and was_cancelled(run_dir, job_id):
        return {**state, "state": State.CANCELLED, "source": "run-cluster cancel"}
    return state


def record_cancel(run_dir: Path, job_id: str) -> None:
    """The run's own word that `cancel` ended this job (the scheduler accepted the cancel)."""
    record = {"job_id": job_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (Path(run_dir) / CANCELLED).write_text(json.dumps(record) + "\n")


def was_cancelled(run_dir: Path, job_id: str) -> bool:
    """Whether `cancel` ended this job of the run (a resumed run's later job is not the cancelled one)."""
    try:
        return json.loads((Path(run_dir) / CANCELLED).read_text()).get("job_id") == job_id
    except (OSError, ValueError, AttributeError):
        return False
