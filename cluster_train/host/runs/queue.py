"""From a checked Submission (cluster_train/host/jobs/build.py) to a queued job: the run directory written, the script
submitted, the manifest recorded; and the Plan every command that queues makes (a run, a rerun, a resume, a sweep, a
race of two profiles), which the API queues and the command line shows first (cluster_train/host/runs/showing.py).
Nothing here prints: what the command line says of a queued plan comes back as lines."""
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional

from cluster_train.shared import config as cfg
from cluster_train.host import runs
from cluster_train.host.jobs import code_snapshot, user_code
from cluster_train.host.jobs.build import Submission
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.schedulers import serves_another


@dataclass(frozen=True)
class Followed:
    """What `--wait` waits for: one job (its scheduler's name, its id, its run directory) or a sweep (its directory,
    no job id)."""

    run_dir: Path
    job_id: str = ""
    scheduler: str = ""


@dataclass
class Plan:
    """What a command is about to queue: shown first, then queued unless --dry-run, then followed where asked."""

    summary: str
    warnings: List[str]
    dry_run_text: str  # printed instead of queuing (the script, under a banner saying nothing was submitted)
    queue: Callable[[], Any]  # writes and submits; returns what `followed` takes
    discard: Callable[[], None]  # a dry run: drop what preparing took (code snapshots)
    followed: Optional[Callable[[Any], Followed]] = None  # what `--wait` follows, from what `queue` returned
    follow_by_default: bool = False
    said: Callable[[Any], List[str]] = lambda queued: []  # what the command line says of what `queue` returned
    run_dirs: List[Path] = field(default_factory=list)  # the run directories `queue` creates (a sweep: its own)
    start_estimate: Callable[[], str] = lambda: ""  # a dry run's line on when it would start (asks the scheduler)
    jobs: List[Any] = field(default_factory=list)  # the Jobs it queues at most (a budget's check: runs/budget.py)


def one_run(sub: Submission, submit: Optional[Callable[[Submission], str]] = None) -> Plan:
    """A new run (or a rerun): queued by `queue`; a resume passes its own `submit`."""
    scheduler = sub.job.adapter
    return Plan(sub.summary, sub.warnings, f"--- {sub.job.scheduler} script (dry run: nothing submitted) ---\n"
                                           f"{sub.script}",
                queue=lambda: (submit or queue)(sub), discard=sub.discard,
                followed=lambda job_id: Followed(Path(sub.job.work.run_dir), job_id, sub.job.scheduler),
                follow_by_default=scheduler.follow_by_default,
                said=lambda job_id: [] if submit else [submitted(sub, job_id)], run_dirs=[Path(sub.job.work.run_dir)],
                start_estimate=lambda: start_estimate(sub.job, sub.script), jobs=[sub.job])


def start_estimate(job: ResolvedJob, script: str) -> str:
    """The scheduler's estimate of when the job's script would start, asked of it without queuing anything; only of
    this machine's scheduler where it serves the job's cluster (another site's file is reviewed here too)."""
    elsewhere = serves_another(job.scheduler, job.scheduler_cluster or job.cluster, job.cluster_file)
    if elsewhere:
        return f"start: no estimate ({elsewhere})"
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="cluster-train-estimate-") as file:
        file.write(script)
        file.flush()
        return job.adapter.start_estimate(Path(file.name))


def queue(sub: Submission, before_submit: Optional[Callable[[Path], None]] = None, **recorded: Any) -> str:
    """Write the run directory, submit, record the manifest. A failed submission leaves nothing behind.
    `before_submit`: writes what else the job reads into its run directory (a function's call); `recorded`: more
    manifest fields."""
    job = sub.job
    run_dir = write_run(sub)
    try:
        if before_submit:
            before_submit(run_dir)
        waits = [waited.job_id for waited in sub.after]
        job_id = job.adapter.submit(run_dir / "job.sh", run_dir, *([waits] if waits else []))
    except BaseException:
        runs.discard(run_dir)
        raise
    waited = {"after": [waited.record() for waited in sub.after]} if sub.after else {}
    write_manifest(sub, job_id, **waited, **recorded)
    return job_id


def submitted(sub: Submission, job_id: str) -> str:
    """What the command line says of a queued run."""
    return f"submitted {sub.job.scheduler} job {job_id}; run directory {sub.job.work.run_dir}"


def write_run(sub: Submission) -> Path:
    """The run directory with its config(s), code snapshot and job.sh; removed again if writing fails."""
    job = sub.job
    run_dir = runs.create(Path(job.work.run_dir))
    try:
        if sub.code:
            code_snapshot.place(sub.code.snapshot, run_dir)
        user_code.dump_config(sub.run, job.work.config_path)  # a command's: no task defaults
        for task, task_run in zip(job.work.tasks, sub.task_runs):
            Path(task.run_dir).mkdir()
            cfg.dump(task_run, task.config_path)
        (run_dir / "job.sh").write_text(sub.script)
    except BaseException:
        runs.discard(run_dir)
        raise
    return run_dir


def write_manifest(sub: Submission, job_id: str, **extra) -> None:
    runs.write_manifest(sub.job, sub.run, job_id, sub.experiment, sub.overrides, sub.rerun_of,
                        sub.code.snapshot.record() if sub.code else None, **extra)
