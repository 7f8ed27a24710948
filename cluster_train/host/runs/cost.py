"""What a run cost (issue 46): the GPU- and CPU-hours its allocations held, from the scheduler's accounting where it
keeps one (Slurm's sacct: every allocation, a requeued job's too, with the TRES it held), else from the run's own
segment records (start to end x the GPUs it asked for); the CPU time it used and the energy it drew where the site
records them; each segment's queue wait (the scheduler's own: from when it let the allocation start to its start,
a wait on the runs it was queued --after shown apart) and the steps each requeue lost. `status` records it in the
manifest; `runs`, sweeps and the report read it from there."""
import datetime
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cluster_train.host.runs import segments
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.runs.segments import Segment

MATCH_S = 120  # an allocation's start and its batch shell's start record: seconds apart at most (a requeue's hold
# keeps two allocations of one job further apart than this)


def run_cost(manifest: Manifest, found: List[Segment], usage: Optional[List[Dict[str, float]]],
             run_dir: Optional[Path] = None, allocations: Optional[List[Dict]] = None) -> Dict:
    """The run's cost record; `usage`: the scheduler's accounting of its allocations (None where it keeps none);
    `run_dir`: where the ranks' sampled GPU energy lies (cluster_train/image/gpu_power.py); `allocations`: every
    allocation of the run's jobs as the scheduler's accounting keeps them (closing.run_allocations)."""
    job = manifest.job
    gpus = int(job.get("nodes") or 1) * int(job.get("gpus_per_node") or 0)
    cpus = int(job.get("nodes") or 1) * int(job.get("tasks_per_node") or 1) * int(job.get("cpus_per_task") or 1)
    if usage:
        held = {"gpu_hours": hours(usage, "gpu_s"), "cpu_hours": hours(usage, "cpu_s"), "source": "sacct"}
    else:
        seconds = [s for s in (segment_seconds(seg) for seg in found) if s is not None]
        held = {"gpu_hours": sum(seconds) * gpus / 3600, "cpu_hours": sum(seconds) * cpus / 3600,
                "source": "the run's segments"}
    used = [u["cpu_used_s"] for u in usage or [] if u.get("cpu_used_s")]
    energy = [u["energy_j"] for u in usage or [] if u.get("energy_j")]
    energy_source = "accounting" if energy else ""
    if not energy and run_dir is not None:
        energy, energy_source = sampled_joules(run_dir), "sampled from the GPUs' power draw"
    waits = queue_waits(manifest, found, allocations or [])
    depended = [after for _, after in waits if after is not None]
    lost = [lost_steps(seg) for seg in found]
    return {"gpus": gpus, "gpu_hours": round(held["gpu_hours"], 4), "cpu_hours": round(held["cpu_hours"], 4),
            "source": held["source"], "cpu_hours_used": round(sum(used) / 3600, 4) if used else None,
            "energy_kwh": round(sum(energy) / 3.6e6, 6) if energy else None,
            "energy_source": energy_source if energy else None,
            "segments": [{"segment": seg.number, "queue_wait_s": wait, "lost_steps": steps,
                          **({"dependency_wait_s": after} if after is not None else {})}
                         for seg, (wait, after), steps in zip(found, waits, lost)],
            "queue_wait_s": sum(w for w, _ in waits if w is not None),
            **({"dependency_wait_s": sum(depended)} if depended else {}),
            "lost_steps": sum(s for s in lost if s is not None)}


def sampled_joules(run_dir: Path) -> List[float]:
    """Each rank's and segment's sampled energy (logs/energy/segment-S-rank-R: `JOULES SECONDS SAMPLES`)."""
    found = []
    for file in sorted((Path(run_dir) / "logs" / "energy").glob("segment-*-rank-*")):
        try:
            found.append(float(file.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue  # a torn or unreadable file: that rank's share is missing, not the run's cost
    return [joules for joules in found if joules > 0]


def hours(usage: List[Dict[str, float]], key: str) -> float:
    return sum(u.get(key, 0) for u in usage) / 3600


def epoch(text: str) -> Optional[float]:
    """A record's time (2026-11-27T15:44:13+0000; sacct's has no zone: local time) as epoch seconds."""
    for form in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.datetime.strptime(text, form).timestamp()
        except ValueError:
            continue
    return None


def segment_seconds(seg: Segment) -> Optional[float]:
    """How long the segment's allocation was held (a running one: until now)."""
    if seg.how and not seg.end:  # ended, its end not known yet (closing.py): no guess at how long
        return None
    start = epoch(seg.start)
    end = epoch(seg.end) if seg.end else time.time()
    return max(0.0, end - start) if start is not None and end is not None else None


def queue_waits(manifest: Manifest, found: List[Segment],
                allocations: List[Dict]) -> List[Tuple[Optional[int], Optional[int]]]:
    """Each segment's wait in the queue, and its wait on the runs it was queued --after (None: it waited on none).
    The scheduler's own times where its accounting has the segment's allocation: from when it let the allocation
    start (eligible: its dependencies met, its begin time, a requeue's hold) to its start; a job's first allocation
    marked `after` (closing.run_allocations) waited on the others from its submission to eligible. Else the run's
    record: from the latest submission or resume before the segment, or from the requeue that ended the segment
    before in the same job."""
    queued = [t for t in map(epoch, [manifest.submitted_at, *(r.get("at", "") for r in manifest.resumes)])
              if t is not None]
    waits, before = [], None
    for seg in found:
        held, start = allocation_of(allocations, seg), epoch(seg.start)
        if held and held.get("eligible") is not None:
            on_others = held.get("after") and held.get("submit") is not None
            waits.append((seconds_between(held["eligible"], held["start"]),
                          seconds_between(held["submit"], held["eligible"]) if on_others else None))
        else:
            requeued = epoch(before.end) if before and before.job_id == seg.job_id and before.end else None
            since = max([t for t in (*queued, requeued) if t is not None and start is not None and t <= start],
                        default=None)
            waits.append((seconds_between(since, start), None))
        before = seg
    return waits


def allocation_of(allocations: List[Dict], segment: Segment) -> Optional[Dict]:
    """The allocation the segment ran in: the one that started nearest its batch shell's start record."""
    started = epoch(segment.start)
    near = [a for a in allocations if a.get("start") is not None and started is not None
            and abs(a["start"] - started) <= MATCH_S]
    return min(near, key=lambda a: abs(a["start"] - started)) if near else None


def seconds_between(since: Optional[float], until: Optional[float]) -> Optional[int]:
    return int(max(0, until - since)) if since is not None and until is not None else None


def lost_steps(seg: Segment) -> Optional[int]:
    """The steps the segment before this one made beyond the checkpoint this one resumed from (None: not known)."""
    known = [r["lost_steps"] for r in seg.resumed_from() if isinstance(r.get("lost_steps"), int)]
    return sum(known) if known else None


def cost_line(cost: Dict[str, Any]) -> str:
    """'cost: 0.0028 GPU-hours on 1 GPU(s), 0.0028 CPU-hours held (sacct), CPU time used not recorded; queue wait
    3 s; no steps lost; energy not recorded by this site'"""
    used = (f"{cost['cpu_hours_used']:.4f} used" if cost.get("cpu_hours_used") is not None
            else "CPU time used not recorded")
    energy = (f"energy {cost['energy_kwh']:.4f} kWh ({cost.get('energy_source') or 'accounting'})"
              if cost.get("energy_kwh") is not None else "energy not recorded by this site")
    lost = f"{cost['lost_steps']} steps lost to requeues" if cost.get("lost_steps") else "no steps lost"
    gpus = f"{cost['gpu_hours']:.4f} GPU-hours on {cost['gpus']} GPU(s), " if cost.get("gpus") else ""
    held = (f" (after {cost['dependency_wait_s']} s waiting on its dependency)"
            if cost.get("dependency_wait_s") is not None else "")
    return (f"cost: {gpus}{cost['cpu_hours']:.4f} CPU-hours held ({cost['source']}), {used}; "
            f"queue wait {cost['queue_wait_s']} s{held}; {lost}; {energy}")


def gpu_hours(manifest: Manifest, run_dir: Path) -> float:
    """What the run's allocations held: as `status` last recorded it (the scheduler's accounting), else from the
    run's own segment records (no scheduler asked: a table of many runs stays quick)."""
    recorded = manifest.cost.get("gpu_hours")
    if isinstance(recorded, (int, float)):
        return float(recorded)
    return run_cost(manifest, segments.read(run_dir), None)["gpu_hours"]
