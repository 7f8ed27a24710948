"""Every segment of an ended run is closed, and a run's segments say the state its status line says.

A batch shell the scheduler SIGKILLs (Slurm after KillWait, LSF after JOB_TERMINATE_INTERVAL) records no end, and
its segment would stay `running` for ever beside a run that `status` calls CANCELLED. The scheduler's account of the
allocation closes it: its state, its batch shell's exit and its end time (`allocations()` of the adapter: sacct,
bhist), recorded in logs/segments.jsonl with whose word it is. Until the accounting has the end (slurmdbd hears of it
after the controller), the segment is shown with the run's state and no end time; while a cancel is still ending the
job, as `cancelling`."""
import dataclasses
from pathlib import Path
from typing import Dict, List, Optional

from cluster_train.host.runs import cost, segments
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.runs.segments import Segment
from cluster_train.host.scheduling.facts import FINISHED, State


def closed(state: Dict, run_dir: Path, found: List[Segment], allocations: Optional[List[Dict]]) -> List[Segment]:
    """The run's segments, its open last one closed from the scheduler's account once the run (`state`: ending.py's)
    has ended, or shown `cancelling` while its cancel ends the job; `allocations`: the run's (run_allocations)."""
    last = found[-1] if found else None
    if last is None or last.how:
        return found
    if state.get("cancelling"):
        return [*found[:-1], dataclasses.replace(last, ending="cancelling")]
    if state["state"] not in FINISHED:
        return found
    held = cost.allocation_of(allocations or [], last)
    if held is None or held.get("end") is None:  # not this job's, or not in the accounting yet: the run's word
        return [*found[:-1], dataclasses.replace(last, how=state["state"].value)]
    how = held["state"] if State.of(held["state"]) in FINISHED else state["state"].value
    segments.record_unended_end(run_dir, how, held["said"], end=held["end"], exit_code=held["exit_code"])
    return segments.read(run_dir)


def run_allocations(scheduler, manifest: Manifest) -> Optional[List[Dict]]:
    """Every allocation of the run's jobs (its first job, then each resume's) as the scheduler's accounting keeps
    them, the first allocation of a job queued after others marked `after` (--after, a pipeline's earlier stage, the
    rest of a resumed element's sweep); None where it keeps none (or, a laptop's view of a remote run, cannot ask)."""
    resumes = manifest.resumes
    jobs = [(resumes[0].get("previous_job_id") if resumes else manifest.job_id, bool(manifest.after)),
            *((r.get("job_id"), bool(r.get("after"))) for r in resumes)]
    ask = getattr(scheduler, "allocations", None)
    found = [(ask(job), after) for job, after in jobs if job] if ask else []
    if all(held is None for held, _ in found):
        return None
    return [{**a, "after": after and i == 0} for held, after in found for i, a in enumerate(held or [])]
