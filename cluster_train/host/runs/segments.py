"""A run's own record of its allocations (`logs/segments.jsonl`): the batch shell appends a `start` and an `end`
line per segment (first start, each requeue; a failure's end says what the restart budget and the watchdog found),
the training appends `train_start` (the epoch and step it resumed from, and the steps the segment before lost); and
`cancel`'s word that it asked the scheduler to end the run's job (`logs/cancelled.json`). The record outlives the
scheduler's memory of the job (cluster_train/host/runs/ending.py weighs it against the scheduler's accounting), and
the manifest keeps the run's history."""
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

FILE = Path("logs") / "segments.jsonl"
CANCELLED = Path("logs") / "cancelled.json"  # written by `run-cluster cancel` before it asks the scheduler
# a failure's end event's keys (the batch shell's restart budget and watchdog), each with its type
ACCOUNTING_WORDS = ("sacct", "bhist")  # an end recorded from the scheduler's accounting starts with its name
FAILURE_KEYS = {"requeued": bool, "failures": int, "max_failures": int, "stuck": dict, "stacks": str, "excluded": list,
                "failed_nodes": list, "died": dict, "saved": bool}


@dataclass
class Segment:
    number: int
    job_id: str = ""
    hosts: str = ""
    start: str = ""
    end: str = ""
    how: str = ""  # COMPLETED | FAILED | TIMEOUT | REQUEUED | TERMINATED | PREEMPTED | NODE_FAIL | HANG; "" running;
    # or, recorded after the shell was killed, the word of the cancel or the scheduler (CANCELLED, ...)
    exit_code: Optional[int] = None
    resumed: List[Dict] = field(default_factory=list)  # per training process: output_dir, epoch, step, lost_steps
    # a failure the batch shell counted against the restart budget (HANG, NODE_FAIL, a rank killed): whether it
    # requeued the job, the run's failures so far (this one included) and the budget (runs/failures.py words them)
    requeued: Optional[bool] = None
    failures: Optional[int] = None
    max_failures: Optional[int] = None
    stuck: Dict = field(default_factory=dict)  # a HANG's stuck rank: rank, host, step, silent_s
    stacks: str = ""  # a HANG's saved stacks, relative to the run directory
    excluded: List[Dict] = field(default_factory=list)  # every node left out of the requeued job so far: host, why
    ended_by: str = ""  # whose word the end is where the batch shell could not record it (sacct's, a cancel's)
    ending: str = ""  # shown for an open segment whose job is being ended (`cancelling`), never recorded
    failed_nodes: List[str] = field(default_factory=list)  # a NODE_FAIL's nodes the scheduler marked failed
    died: Dict = field(default_factory=dict)  # the rank whose end ended the steps (a signal, an exception): rank, host
    saved: Optional[bool] = None  # False: a TIMEOUT whose steps saved nothing to resume from, so it was not requeued

    @property
    def budget_spent(self) -> bool:
        """A failure beyond the restart budget: the batch shell did not requeue it, and the run has FAILED."""
        return (not self.requeued and isinstance(self.failures, int) and isinstance(self.max_failures, int)
                and self.failures > self.max_failures)

    @property
    def failed_hosts(self) -> str:
        """A NODE_FAIL's nodes as the scheduler named them ('n2'), else 'one of' the segment's ('one of n[1-2]')."""
        return ", ".join(self.failed_nodes) or f"one of {self.hosts or '?'}"

    def resumed_from(self) -> List[Dict]:
        """Where each training process went on from: its epoch counted from 1, as the job log counts it (the
        training records Lightning's current_epoch, which counts from 0), its step, and the steps the segment before
        made beyond that step (lost_steps; absent where no progress file said how far it got)."""
        return [{"output_dir": r.get("output_dir"), "epoch": r["resumed_epoch"] + 1, "step": r["resumed_step"],
                 **({"lost_steps": r["lost_steps"]} if isinstance(r.get("lost_steps"), int) else {})}
                for r in self.resumed
                if isinstance(r.get("resumed_epoch"), int) and isinstance(r.get("resumed_step"), int)]

    def line(self) -> str:
        resumed = resumed_text(self.resumed_from()[:1])  # a job that trains several models: the first one's
        return (f"segment {self.number}: job {self.job_id or '-'} on {self.hosts or '-'}, {self.start or '?'} -> "
                + (self.ending or f"{self.end or ('?' if self.how else 'running')} {self.how or 'RUNNING'}")
                + (f" (exit {self.exit_code})" if self.exit_code not in (None, 0) else "")
                + (f", its end from {self.ended_by} (its batch shell was killed before it recorded one)"
                   if self.ended_by.startswith(ACCOUNTING_WORDS) else "")
                + (f": a node failed ({self.failed_hosts}), the scheduler requeued the job"
                   if self.how == "NODE_FAIL" and not self.budget_spent else "")
                + (f", resumed from {resumed}" if resumed else ""))


def resumed_text(resumed_from: List[Dict]) -> str:
    """'epoch 3 step 133 (12 steps lost)', one per training process, `; `-joined: the steps lost are those the
    segment before made after its last checkpoint (unknown where it left no progress file)."""
    return "; ".join(f"epoch {r['epoch']} step {r['step']}"
                     + (f" ({r['lost_steps']} steps lost)" if isinstance(r.get("lost_steps"), int) else "")
                     for r in resumed_from)


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
            seg.job_id, seg.hosts, seg.start = (str(event.get("job_id", "")), event.get("hosts", ""),
                                                event.get("time", ""))
        elif kind == "end":
            seg.end, seg.how, seg.exit_code = event.get("time", ""), event.get("how", ""), event.get("exit_code")
            seg.ended_by = str(event.get("recorded_by", ""))
            record_failure(seg, event)
        elif kind == "train_start":
            seg.resumed.append(event)
    return [segments[n] for n in sorted(segments)]


def record_failure(seg: Segment, end: Dict) -> None:
    """A failure's details from its end event, each kept only where it has the contract's type (a record written by
    hand or by an older batch shell shows what it has)."""
    for key, kind in FAILURE_KEYS.items():
        if isinstance(end.get(key), kind):
            setattr(seg, key, end[key])
    seg.excluded = [e for e in seg.excluded if isinstance(e, dict) and e.get("host")]
    seg.failed_nodes = [host for host in seg.failed_nodes if isinstance(host, str) and host]


def as_records(run_dir: Path, found: Optional[List[Segment]] = None) -> List[Dict]:
    """The segments as the manifest keeps them (`found`: as `status` shows them; else as recorded)."""
    found = read(run_dir) if found is None else found
    return [{"segment": s.number, "job_id": s.job_id, "hosts": s.hosts, "start": s.start, "end": s.end,
             "how": s.how or "RUNNING", "exit_code": s.exit_code, "resumed_from": s.resumed_from(),
             **{k: getattr(s, k) for k in FAILURE_KEYS if getattr(s, k) not in (None, "", {}, [])},
             **({"ended_by": s.ended_by} if s.ended_by else {})}
            for s in found]


def record_unended_end(run_dir: Path, how: str, ended_by: str, end: Optional[float] = None,
                       exit_code: Optional[int] = None) -> None:
    """The last segment's end, where its batch shell could not record it (killed after the scheduler's grace time):
    from the scheduler's account of the allocation (`end`: its end, epoch seconds; its exit), written by `status`
    (runs/closing.py), or else by whoever next continues the run, from the word of the cancel or the scheduler
    (`ended_by`)."""
    found = read(run_dir)
    if not found or found[-1].how:
        return
    last = found[-1]
    record = {"event": "end", "segment": last.number, "job_id": last.job_id,
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(end)), "how": how, "exit_code": exit_code,
              "recorded_by": ended_by}
    with (Path(run_dir) / FILE).open("a") as f:
        f.write(json.dumps(record) + "\n")


def record_cancel(run_dir: Path, job_id: str, by: str = "") -> None:
    """The run's word that `cancel` asks the scheduler to end this job: written first, so that it is there however
    the job ends (a batch shell killed after the scheduler's grace time records nothing). `by`: who asked, where
    not `run-cluster cancel` (an interactive session's release)."""
    record = {"job_id": job_id, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **({"by": by} if by else {})}
    (Path(run_dir) / CANCELLED).write_text(json.dumps(record) + "\n")


def cancel_refused(run_dir: Path, job_id: str, why: str) -> None:
    """The scheduler did not take the cancel (or it was interrupted before asking): the record says so, and no
    longer counts as the job's end."""
    record = cancel_of(run_dir, job_id)
    if record is not None:
        (Path(run_dir) / CANCELLED).write_text(json.dumps({**record, "refused": why}) + "\n")


def cancel_of(run_dir: Path, job_id: str) -> Optional[Dict]:
    """`cancel`'s record for this job of the run (a resumed run's later job is not the cancelled one), if the
    scheduler took it."""
    try:
        record = json.loads((Path(run_dir) / CANCELLED).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("job_id") == job_id and "refused" not in record else None
