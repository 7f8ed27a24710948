"""A run's failures as `status` words them, from the run's own record (logs/segments.jsonl, whose failure ends the
batch shell's watchdog and restart budget write: cluster_train/host/schedulers/templates/_segments.sh.j2): a hang's
stuck rank and its stacks, each failure-requeue against the budget, the nodes left out of the requeued job, and the
cause of a run that ended on a failure, with the whole history where the budget ran out. The words are
causes.ENDED_BY's, which the troubleshooting page explains."""
from pathlib import Path
from typing import List, Optional

from cluster_train.host.runs import causes, segments
from cluster_train.host.runs.segments import Segment


def segment_lines(segment: Segment) -> List[str]:
    """The segment's line, and under it what its failure's end says: the stuck rank, the budget it spent."""
    details = [hang(segment)] if segment.stuck else []
    details += [died(segment)] if segment.died else []
    if segment.failures is not None:
        details.append(budget_step(segment))
    return [segment.line()] + [f"  {line}" for line in details]


def hang(segment: Segment) -> str:
    """'HANG: rank 1 on host n2 made no step for 62 s (at step 40); stacks in logs/hang-1'."""
    stuck = segment.stuck
    return causes.ended_by("hang", **{k: str(stuck.get(k, "?")) for k in ("rank", "host", "silent_s", "step")},
                           stacks=segment.stacks or "(none saved)")


def died(segment: Segment) -> str:
    """'rank 1 died on host n3 (exit 137)': the rank whose death ended the segment's steps; 'rank 0 on host n1
    exited 1 (its own exit, ...)' where it ended itself (an exception: the batch shell records that rank's code)."""
    kind = "raised" if raised(segment) else "died"
    return causes.ended_by(kind, rank=str(segment.died.get("rank", "?")), host=str(segment.died.get("host", "?")),
                           exit_code=str(segment.exit_code))


def raised(segment: Segment) -> bool:
    """A FAILED segment that a rank's own exit ended (not a signal: exit 128 + N), which is never requeued."""
    return (segment.how == "FAILED" and bool(segment.died) and segment.failures is None
            and isinstance(segment.exit_code, int) and 0 < segment.exit_code < 129)


def unsaved(segment: Segment) -> str:
    """'the time limit was reached and the script saved no checkpoint: ...' for a segment warned at its time limit
    whose steps saved nothing to resume from; "" for any other."""
    return causes.ended_by("unsaved", exit_code=str(segment.exit_code)) if segment.saved is False else ""


def budget_step(segment: Segment) -> str:
    """'failure 1 of at most 2, requeued without n2', or where it was not requeued, why the run ended."""
    if segment.requeued:
        left_out = [e["host"] for e in segment.excluded]  # every node left out so far, not only this failure's
        return causes.ended_by("requeued", failures=str(segment.failures), max_failures=str(segment.max_failures),
                               without=f" without {', '.join(left_out)}" if left_out else "")
    if segment.budget_spent:
        return f"failure {segment.failures}, max_failures {segment.max_failures}: not requeued, the run FAILED"
    return f"failure {segment.failures} of at most {segment.max_failures}: not requeued"


def excluded_line(found: List[Segment]) -> Optional[str]:
    """Every node left out of the run's requeued jobs, with why (the last end that names them holds them all)."""
    named = [s.excluded for s in found if s.excluded]
    if not named:
        return None
    hosts = "; ".join(f"{e['host']} ({e.get('why') or 'no reason recorded'})" for e in named[-1])
    return causes.ended_by("excluded", hosts=hosts)


def cause(found: List[Segment], own_exit: bool = True) -> str:
    """What ended a run whose last segment ended on a failure the record names: the budget spent, with every
    failure of the run; a hang that was not requeued; a time limit with nothing saved; a rank's exception (unless
    `own_exit` is False: status asks the logs first, which may say which exception); else ""."""
    last = found[-1] if found else None
    if last is None or not last.how:
        return ""
    if last.budget_spent:
        history = ", ".join(failure_text(s) for s in found if s.failures is not None or s.how in FAILURES)
        return causes.ended_by("budget", failures=str(last.failures), max_failures=str(last.max_failures),
                               history=history)
    if last.stuck and not last.requeued:
        return hang(last)
    return unsaved(last) or (own_exit_cause(found) if own_exit else "")


def own_exit_cause(found: List[Segment]) -> str:
    """'rank 0 on host n1 exited 1 (its own exit, ...)' where the last segment ended by a rank's own exit, else ""."""
    last = found[-1] if found else None
    return died(last) if last is not None and raised(last) else ""


FAILURES = ("HANG", "NODE_FAIL", "FAILED")  # the ends a segment's failure has, requeued or not


def failure_text(segment: Segment) -> str:
    """'segment 1 HANG (rank 1 on host n2, no step for 62 s)', 'segment 2 NODE_FAIL (n3)',
    'segment 3 FAILED (rank 1 on host n2, exit 137)'."""
    stuck, dead = segment.stuck, segment.died
    if stuck:
        said = [f"rank {stuck.get('rank', '?')} on host {stuck.get('host', '?')}",
                f"no step for {stuck.get('silent_s', '?')} s"]
    elif segment.how == "NODE_FAIL":
        said = [segment.failed_hosts]
    else:
        said = [f"rank {dead.get('rank', '?')} on host {dead.get('host', '?')}"] if dead else []
        said += [f"exit {segment.exit_code}"] if segment.exit_code not in (None, 0) else []
    return f"segment {segment.number} {segment.how}" + (f" ({', '.join(said)})" if said else "")


def told(run_dir: Path, found: List[Segment], own_exit: bool = True) -> str:
    """cause(found), led where the budget ran out by what the logs name of the failure (a rank that died and its
    host): the record counts the failures, the logs say what each was."""
    record = cause(found, own_exit)
    said = causes.diagnose(run_dir) if record and found[-1].budget_spent else None
    return f"{said}; {record}" if said and said not in record else record


def of_failed(run_dir: Path, state: str) -> str:
    """What `runs` shows of a FAILED run: the failure its record names, else the cause its logs name, else a rank's
    own exit, else nothing (status's order)."""
    if state != "FAILED":
        return ""
    found = segments.read(run_dir)
    return (told(run_dir, found, own_exit=False) or causes.diagnose(run_dir, rank_only=False)
            or own_exit_cause(found) or causes.diagnose(run_dir) or "")
