"""One run's status as data: what `run-cluster status` shows and `Run.status()` returns (cluster_train/host/api/run.py),
made once here from the scheduler's word, the run's record and its logs (cluster_train/host/runs/ending.py weighs them).
Reading the status also records what it found in the manifest (the segments, the cost so far; a completed run's GPU
and speed)."""
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cluster_train.host import fabric, runs
from cluster_train.host.runs import causes, closing, cost, ending, failures, metrics, segments, tracker_sync
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.runs.segments import Segment
from cluster_train.host.scheduling.facts import State

NOT_SHOWN = ("state", "ended_by", "gone", "cancelling")  # the state's fields that status words itself, or not at all


@dataclass(frozen=True)
class RunStatus:
    """A run's state and what ended it, in the words `run-cluster status` prints.

    `state` is the one vocabulary over every scheduler; `ended` is True once anyone's word says the job has ended
    (a requeued job has not); `cause` names what ended a run that did not complete (a cancel, the scheduler, a
    failure its record or its logs name: a hang, the restart budget spent), "" otherwise; `segments` hold each
    failure's details (`stuck`, `stacks`, `failures`, `excluded`; `resumed_from()`'s `lost_steps`); `results` is a
    completed run's results.json ({} otherwise); `cost` what its allocations held (runs/cost.py; {} before one);
    `job_id` and `run_id` name its job and run, `scheduler` the adapter; `cancelling`: who asked the scheduler to end
    a job still ending, and when; `details`: the scheduler's other fields; `data`: the data image it read ("" for
    none); `trackers`: where its trackers log; `warnings`: what its logs warn of (NCCL on TCP); `own_code`: a run of
    your own command. `RunStatus.from_dict(said)` reads it back from what `status --json` said."""

    state: State
    cause: str
    job_id: str
    run_id: str
    scheduler: str
    ended: bool
    cancelling: str = ""  # who asked the scheduler to end the job that is still ending, and when
    details: Dict[str, Any] = field(default_factory=dict)  # the scheduler's other fields (nodes, exit_code, source)
    segments: Tuple[Segment, ...] = ()  # every allocation the run had: first start, each requeue
    data: str = ""  # the data image it read (name and digest), "" for none
    trackers: Tuple[str, ...] = ()  # where its trackers log, and whether an offline one is uploaded
    warnings: Tuple[str, ...] = ()  # e.g. NCCL fell back to TCP on a partition with a fast fabric
    results: Dict[str, Any] = field(default_factory=dict)
    cost: Dict[str, Any] = field(default_factory=dict)  # runs/cost.py's record: GPU-hours, queue waits, steps lost
    own_code: bool = False  # a run of your own command: every number of its results.json is a result

    @property
    def shown(self) -> str:
        """The state's word for a person: 'cancelling' for a job being cancelled, else the state's name."""
        return "cancelling" if self.cancelling else self.state.value

    @property
    def excluded(self) -> List[Dict[str, str]]:
        """The nodes left out of the run's requeued jobs, each {'host', 'why'}; [] where none was."""
        return next((list(s.excluded) for s in reversed(self.segments) if s.excluded), [])

    @property
    def straggler(self) -> Optional[Dict[str, Any]]:
        """A completed run's rank much slower than the others ({'rank', 'host', 'times'}: its median step time over
        the ranks' median), else None."""
        return step_times_of(self.results).get("straggler") or None

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready (`status --json`: how a laptop asks a cluster over SSH)."""
        return {**dataclasses.asdict(self), "state": self.state.value}

    @classmethod
    def from_dict(cls, said: Dict[str, Any]) -> "RunStatus":
        """The status `said` (as_dict's form, from `status --json`), read back."""
        fields = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in said.items() if k in fields}
        return cls(**{**kept, "state": State.of(said["state"]), "trackers": tuple(said.get("trackers", ())),
                      "warnings": tuple(said.get("warnings", ())),
                      "segments": tuple(Segment(**s) for s in said.get("segments", ()))})


def status_of(manifest: Manifest, scheduler, run_dir: Path) -> RunStatus:
    """The run's status, asked of `scheduler` (its manifest's adapter, or anything with its state and accounting)."""
    job_id = manifest.job_id
    state = ending.run_state(scheduler, job_id, run_dir)
    found = segments.read(run_dir)
    held = closing.run_allocations(scheduler, manifest) if found else None  # asked once: the closing, the waits
    found = closing.closed(state, run_dir, found, held)  # one state: the run's line and its segments
    usage = getattr(scheduler, "usage", lambda _: None)(job_id)  # a laptop's view of a remote run has none
    spent = cost.run_cost(manifest, found, usage, run_dir, held) if found else {}
    runs.update_manifest(run_dir, segments=segments.as_records(run_dir, found), **({"cost": spent} if spent else {}))
    job = manifest.job
    slow_network = fabric.verdict(run_dir, job.get("fabric", "")) if job.get("check_fabric") else None
    results = completed_results(state, run_dir)
    # the run's record of a hang or a spent restart budget says more than the scheduler's word (FAILED, NODE_FAIL, a
    # cancel of the steps the watchdog ended) and than a log that holds every segment's lines; a rank's own exit
    # (an exception) comes last: a function's recorded exception or the log's cause (disk full) says which
    cause = "" if results or not ending.has_ended(state) else (
        causes.pruned(run_dir) or failures.told(run_dir, found, own_exit=False) or state.get("ended_by")
        or causes.raised(run_dir) or causes.diagnose(run_dir, rank_only=False) or failures.own_exit_cause(found)
        or causes.diagnose(run_dir) or "")
    return RunStatus(state["state"], cause, job_id, manifest.run_id, scheduler.name, ending.has_ended(state),
                     state.get("cancelling") or "", {k: v for k, v in state.items() if k not in NOT_SHOWN and v},
                     tuple(found), manifest.data_version(64) if manifest.data else "",
                     tuple(tracker_sync.status_lines(run_dir)), (slow_network,) if slow_network else (), results,
                     spent, manifest.is_own_code)


def completed_results(state: Dict[str, Any], run_dir: Path) -> Dict[str, Any]:
    """A completed run's results.json, its GPU and speed copied into its manifest; {} for any other run."""
    path = Path(run_dir) / "results.json"
    if state["state"] != State.COMPLETED or not path.is_file():
        return {}
    results = json.loads(path.read_text())
    runs.update_manifest(run_dir, gpu={k: results.get(k) for k in ("gpu", "cuda", "driver")},
                         speed={**{k: results.get(k) for k in ("precision", "compiled", "input", "throughput")},
                                "step_times": step_times_of(results)})
    return results


def status_lines(status: RunStatus) -> List[str]:
    """`run-cluster status`'s lines: the state (whose word it is), every segment, and what ended the run."""
    lines = [f"{status.run_id}: {status.scheduler} job {status.job_id} {status.shown}"
             + "".join(f" {k}={v}" for k, v in status.details.items())]
    lines += [f"  data: image {status.data}"] if status.data else []
    lines += [f"  {line}" for segment in status.segments for line in failures.segment_lines(segment)]
    excluded = failures.excluded_line(list(status.segments))
    lines += [f"  {excluded}"] if excluded else []
    lines += [f"  {cost.cost_line(status.cost)}"] if status.cost else []
    lines += [f"  {line}" for line in status.trackers]
    lines += [f"  WARNING: {warning}" for warning in status.warnings]
    if status.results:
        lines += result_lines(status.results, status.own_code)
    elif status.cause:
        lines.append(f"  cause: {status.cause}")
    return lines


def result_lines(results: Dict[str, Any], own_code: bool = False) -> List[str]:
    """A completed run's final and best metrics (your own code's: every number it wrote), and how fast it trained."""
    shown = metrics.own_results(results) if own_code else {
        k: v for k, v in results.items() if k.startswith(("final_", "best_", "epochs"))}
    lines = ["  result: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in shown.items())]
    if own_code:  # the image's speed facts are the tasks' own: your numbers named input or speed are results
        return lines
    speed = [input_wait_line(results)] if isinstance(results.get("input"), dict) else []
    speed += spread_words(step_times_of(results))
    return lines + ([f"  speed: {'; '.join(speed)}"] if speed else [])


def step_times_of(results: Dict[str, Any]) -> Dict[str, Any]:
    """Each rank's step times and the straggler among them (the image's speed facts: results.json's `step_times`,
    or under `speed` where a task keeps its speed facts there); {} where the run has none."""
    speed = results.get("speed")
    found = results.get("step_times") or (speed.get("step_times") if isinstance(speed, dict) else None)
    return found if isinstance(found, dict) else {}


def spread_words(step_times: Dict[str, Any]) -> List[str]:
    """'step time 41-63 ms over 4 ranks' (the range of the ranks' median step times), and 'straggler: rank 3 on n2
    steps 1.52 times the median' where one rank is much slower than the others; nothing for one rank."""
    medians = [r["median_ms"] for r in step_times.get("ranks") or []
               if isinstance(r, dict) and isinstance(r.get("median_ms"), (int, float))]
    words = [f"step time {min(medians):.3g}-{max(medians):.3g} ms over {len(medians)} ranks"] if medians[1:] else []
    slow = step_times.get("straggler")
    if isinstance(slow, dict) and isinstance(slow.get("times"), (int, float)):
        words.append(f"straggler: rank {slow.get('rank')} on {slow.get('host')} steps {slow['times']:.2f} "
                     f"times the median")
    return words


def input_wait_line(results: Dict[str, Any]) -> str:
    """How the run trained and whether it waited for data (cluster_train/image/speed.py's figures, rank 0)."""
    wait = results["input"]
    rate = results.get("throughput", {}).get("samples_per_s")
    line = (f"precision {results.get('precision')},{f' {rate:.1f} samples/s,' if rate else ''} waited for data "
            f"{wait['wait_fraction']:.0%} of {wait['data_wait_s'] + wait['compute_s']:.0f} s of training")
    if wait.get("data_from") in ("image", "staged"):
        line += f" (data read from the {'staged' if wait['data_from'] == 'staged' else 'shared'} data image)"
    if wait["input_bound"]:
        line += f": input-bound, raise data.num_workers ({wait['num_workers']} now)"
    return line
