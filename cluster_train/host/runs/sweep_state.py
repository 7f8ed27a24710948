"""A queued sweep seen afterwards: its record (sweep.json), each element's state, segments and best metric as one
table, waiting for every element (reporting how many are done, running, failed and queued), cancelling the array,
every element's logs (cluster_train/host/runs/sweep.py queues it)."""
import json
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.progress import Meter, Report, ignore
from cluster_train.host.runs import cost, ending
from cluster_train.host.runs.ending import EndWatch, has_ended, run_state
from cluster_train.host.runs.segments import read as read_segments
from cluster_train.host.runs.run_status import RunStatus
from cluster_train.host.schedulers import FINISHED, State, adapter

SWEEP = "sweep.json"


def is_sweep(path: Path) -> bool:
    return (Path(path) / SWEEP).is_file()


def read_sweep(sweep_dir: Path) -> Dict:
    try:
        return json.loads((Path(sweep_dir) / SWEEP).read_text())
    except ValueError:
        raise UserError(f"{Path(sweep_dir) / SWEEP} is not valid JSON; it is damaged, restore it") from None


class ArrayView:
    """The scheduler as run_state() asks it, answering for the array's own elements from one question for the whole
    array (Slurm: one scontrol, then one sacct) instead of one per element; any other job (a resumed element's) and
    every adapter without array_states() is asked as usual."""

    def __init__(self, scheduler, record: Dict):
        self.scheduler, self.arrays = scheduler, array_ids(record)
        self.name, self.accounting_name = scheduler.name, scheduler.accounting_name
        self.elements = {e["job_id"] for e in record["elements"]}
        self.live = merged(scheduler.array_states(array) for array in self.arrays)
        self.said: Optional[Dict] = None  # the arrays' accounting, once asked (None: ask per element)
        self.asked = False

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict:
        if self.live is None or job_id not in self.elements:
            return self.scheduler.state(job_id, run_dir)
        return self.live.get(job_id) or {"state": State.UNKNOWN, "gone": True}

    def accounting(self, job_id: str) -> Optional[Dict]:
        if job_id not in self.elements:
            return self.scheduler.accounting(job_id)
        if not self.asked:  # an answer without this element is the answer: per-element sacct reads the same lines
            self.said, self.asked = merged(self.scheduler.array_accounting(array) for array in self.arrays), True
        return self.scheduler.accounting(job_id) if self.said is None else self.said.get(job_id)


def array_ids(record: Dict) -> List[str]:
    """The sweep's job arrays: one, or a split sweep's chained arrays (sweep.json before splits named one)."""
    return [array["job_id"] for array in record.get("arrays") or [{"job_id": record["array_job_id"]}]]


def holding(run_dir: Path) -> List[str]:
    """The jobs a resumed sweep element waits for, so that its sweep still runs at most --max-parallel at once: a
    resumed element is a job of its own, outside the array, whose %K throttle counts only its own tasks (and none
    can be added to it). It waits for every array of its sweep with a task queued or running, and for the sweep's
    other resumed elements not ended once they are --max-parallel. [] where it is no sweep's element."""
    sweep_dir = Path(run_dir).parent
    if not is_sweep(sweep_dir):
        return []
    record = read_sweep(sweep_dir)
    view = ArrayView(adapter(record["scheduler"]), record)
    arrays = record.get("arrays") or [{"job_id": record["array_job_id"], "first": 0, "count": len(record["elements"])}]
    held = [array["job_id"] for array in arrays
            if any(not has_ended(view.state(e["job_id"], Path(e["run_dir"])))
                   for e in record["elements"][array["first"]:array["first"] + array["count"]])]
    resumed = []  # the other elements resumed before, still queued or running
    for element in record["elements"]:
        other = Path(element["run_dir"])
        job_id = runs.read_manifest(other).job_id
        if other != Path(run_dir) and job_id != element["job_id"] and not has_ended(view.state(job_id, other)):
            resumed.append(job_id)
    return held + (resumed if len(resumed) >= record.get("max_parallel", 1) else [])


def merged(answers) -> Optional[Dict]:
    """Several arrays' answers as one (None: the scheduler did not answer for one of them, so ask per element)."""
    found: Dict = {}
    for answer in answers:
        if answer is None:
            return None
        found.update(answer)
    return found


def element_rows(sweep_dir: Path) -> List[Dict]:
    """Per element: index, swept values, state, segments, best metric."""
    record = read_sweep(sweep_dir)
    view = ArrayView(adapter(record["scheduler"]), record)
    keys = [axis["key"] for axis in record["axes"]]
    rows = []
    for element in record["elements"]:
        run_dir = Path(element["run_dir"])
        manifest = runs.read_manifest(run_dir)
        state = run_state(view, manifest.job_id, run_dir)  # a resumed element's new job
        swept = {key: element["values"].get(key, "-") for key in keys}  # a sweep file's run may leave a key out
        held = cost.gpu_hours(manifest, run_dir)
        rows.append({"element": f"e{element['index']}", **swept, "state": ending.shown(state),
                     "segments": str(len(read_segments(run_dir))), "gpu-h": f"{held:.2f}",
                     "best": best_metric(run_dir)})
    return rows


def best_metric(run_dir: Path) -> str:
    path = run_dir / "results.json"
    if not path.is_file():
        return "-"
    results = json.loads(path.read_text())
    for key, value in results.items():
        if key.startswith("best_") and isinstance(value, (int, float)):
            return f"{key} {value:.4g}"
    return "-"


def sweep_status(sweep_dir: Path) -> RunStatus:
    """A sweep's status: RUNNING (or PENDING) while any element has not ended, then COMPLETED if all completed, else
    the first failed element's state; `details` holds each element's row of `run-cluster status`'s table."""
    rows = element_rows(sweep_dir)
    states = [State.of(row["state"]) if row["state"] != "cancelling" else State.RUNNING for row in rows]
    unended = [s for s in states if s not in FINISHED]
    failed = [(row, s) for row, s in zip(rows, states) if s in FINISHED and s != State.COMPLETED]
    state = (State.RUNNING if State.RUNNING in unended else unended[0] if unended
             else failed[0][1] if failed else State.COMPLETED)
    record = read_sweep(sweep_dir)
    cause = "" if unended or not failed else f"{failed[0][0]['element']} {failed[0][1].value}"
    return RunStatus(state, cause, ",".join(array_ids(record)), record["sweep_id"], record["scheduler"], not unended,
                     details={row["element"]: row for row in rows})


def status_table(sweep_dir: Path, rows: Optional[List[Dict]] = None) -> str:
    rows = rows if rows is not None else element_rows(sweep_dir)
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in rows]
    record = read_sweep(sweep_dir)
    arrays = array_ids(record)
    head = (f"{record['sweep_id']}: {record['scheduler']} array{'s' if len(arrays) > 1 else ''} {', '.join(arrays)}, "
            f"{len(rows)} runs, at most {record['max_parallel']} at once; "
            f"{sum(float(r.get('gpu-h') or 0) for r in rows):.2f} GPU-hours in all")
    return "\n".join([head, *(line.rstrip() for line in lines)])


def cancel(sweep_dir: Path) -> str:
    """The whole array at once (on local: the sweep script's process group, each unended element marked), and each
    resumed element's own job; each element still running or queued records the cancel first
    (cluster_train/host/runs/ending.py). What was done, in a line."""
    record = read_sweep(sweep_dir)
    scheduler = adapter(record["scheduler"])
    view = ArrayView(scheduler, record)
    current = [(Path(e["run_dir"]), runs.read_manifest(Path(e["run_dir"])).job_id)
               for e in record["elements"]]  # a resumed element's job is its own, no longer the array's
    unended = [(run_dir, job_id) for run_dir, job_id in current if not has_ended(run_state(view, job_id, run_dir))]
    if not unended:
        return f"every element of {record['sweep_id']} has ended; nothing to cancel"
    in_array = {e["job_id"] for e in record["elements"]}
    resumed = [(run_dir, job_id) for run_dir, job_id in unended if job_id not in in_array]
    arrays = array_ids(record) if len(resumed) < len(unended) else []
    run_dirs = [e["run_dir"] for e in record["elements"]]
    ending.cancel(unended, lambda: ([scheduler.cancel_array(array, Path(sweep_dir), run_dirs) for array in arrays],
                                    [scheduler.cancel(job_id, run_dir) for run_dir, job_id in resumed]))
    jobs = [f"array{'s' if len(arrays) > 1 else ''} {', '.join(arrays)}"] if arrays else []
    jobs += [f"job {job_id} ({run_dir.name}, resumed)" for run_dir, job_id in resumed]
    return (f"cancelled {record['scheduler']} {', '.join(jobs)} ({record['sweep_id']}, {len(unended)} of its "
            f"{len(record['elements'])} runs had not ended)")


def ended_uncompleted(scheduler, run_dir: Path) -> bool:
    """Whether the element's current job (a resumed element's own) ended without completing."""
    state = run_state(scheduler, runs.read_manifest(run_dir).job_id, run_dir)
    return has_ended(state) and state["state"] != State.COMPLETED


def wait_elements(sweep_dir: Path, timeout_s: Optional[float], poll_s: float = 2.0, report: Report = ignore) -> bool:
    """Poll until every element has ended (None: however long that takes), each poll reporting how many are done,
    running, failed and queued; whether they all have."""
    record = read_sweep(sweep_dir)
    scheduler = adapter(record["scheduler"])
    watching = [EndWatch(scheduler, e["job_id"], Path(e["run_dir"])) for e in record["elements"]]
    ended: Dict[int, State] = {}
    meter = Meter(f"sweep {record['sweep_id']}", unit="")
    deadline = time.time() + timeout_s if timeout_s is not None else None
    while deadline is None or time.time() < deadline:
        for number, watch in enumerate(watching):
            state = None if number in ended else watch.poll()
            if state is not None:
                ended[number] = state["state"]
        states = [ended.get(number) or watch.last["state"] for number, watch in enumerate(watching)]
        report(meter.at(stage=counts_stage(sweep_counts(states)), final=len(ended) == len(watching)))
        if len(ended) == len(watching):
            return True
        time.sleep(poll_s)
    return False


def sweep_counts(states: Iterable[State]) -> Dict[str, int]:
    """How many elements are done (completed), running, failed (ended otherwise) and queued (all else)."""
    counts = {"done": 0, "running": 0, "failed": 0, "queued": 0}
    for state in states:
        counts["done" if state == State.COMPLETED else "running" if state == State.RUNNING
               else "failed" if state in FINISHED else "queued"] += 1
    return counts


def counts_stage(counts: Dict[str, int]) -> str:
    """'2 done, 1 running, 0 failed, 3 queued'"""
    return ", ".join(f"{n} {name}" for name, n in counts.items())


def logs_text(sweep_dir: Path) -> str:
    """Every element's logs, each under its name and swept values."""
    from cluster_train.host.runs.follow import logs_text as run_logs

    return "".join(f"==> e{element['index']} ({' '.join(f'{k}={v}' for k, v in element['values'].items())}) <==\n"
                   + run_logs(Path(element["run_dir"])) for element in read_sweep(sweep_dir)["elements"])
