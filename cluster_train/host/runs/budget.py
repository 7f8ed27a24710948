"""Your GPU-hour budget on a cluster (issue 46): `budget: {gpu_hours: 500, period: 30d}` in your settings, for one
cluster (`clusters: {NAME: {budget: ...}}`) or all; `period`: a rolling `Nd`, the calendar `month` or `year`, or a
start date (YYYY-MM-DD); `account`: count only that account's jobs. What is used is the scheduler's accounting of
all your jobs there since the period began (Slurm's sacct), else cluster-train's own runs of that cluster. A
submission whose most possible cost (runs/cost: time limit x GPUs, every run it queues) would pass what is left is
warned of, or refused with --strict-budget; where the site states the account's own limit (sacctmgr GrpTRESMins),
the line names it."""
import datetime
from typing import Dict, List, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import settings
from cluster_train.host.settings.budget_setting import Budget, parse
from cluster_train.host.jobs.cost import most_hours, unit
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.runs import cost
from cluster_train.host.schedulers import serves_another

# the refusal's fix, the same from the command line (--strict-budget) and the API (Job(..., strict_budget=True))
REFUSES = ("--strict-budget refuses it; shorten the time limit, ask for fewer GPUs or runs, or raise budget.gpu_hours "
           "in your settings")


def used_gpu_hours(job: ResolvedJob, budget: Budget) -> Tuple[float, str]:
    """GPU-hours used on the job's cluster since the budget's period began, and from whose record: the scheduler's
    accounting only where this machine's scheduler serves that cluster (another's counts other jobs)."""
    cluster, scheduler, elsewhere = job.cluster, job.adapter, serving_another(job)
    since = budget.since.strftime("%Y-%m-%dT%H:%M:%S")
    records = None if elsewhere else scheduler.usage(since=since, account=budget.account)
    if records is not None:
        return sum(r["gpu_s"] for r in records) / 3600, f"{scheduler.title}'s accounting, all your jobs"
    from cluster_train.host.runs import run_roots, read_manifest  # the runs rooms' list, read only without accounting

    hours = 0.0
    for root in run_roots():
        for file in root.glob("*/manifest.json") if root.is_dir() else []:
            manifest = read_manifest(file.parent)
            submitted = cost.epoch(manifest.submitted_at) or 0
            if manifest.cluster == cluster and submitted >= budget.since.timestamp():
                hours += cost.gpu_hours(manifest, file.parent)
    why = "this machine's scheduler serves another cluster" if elsewhere else "this scheduler keeps no accounting here"
    return hours, f"cluster-train's runs only: {why}"


def check(jobs: List[ResolvedJob], strict: bool) -> List[str]:
    """What the submission of `jobs` says of each budget it draws on: a line per cluster with one, `warning: ...`
    where it may pass what is left; over it with `strict`, a UserError and nothing queued. Every door calls this:
    the command line (runs/showing.py) and the API (api/job.py, strict_budget=)."""
    lines, now = [], datetime.datetime.now()
    for cluster, gpu_jobs in by_cluster(jobs).items():
        user = settings.load(cluster)
        if "budget" not in user:
            continue
        budget = parse(user["budget"], f"your settings for {cluster}", now)
        most = sum(most_hours(job) for job in gpu_jobs)
        if strict and most > budget.gpu_hours:  # more than all of it: refused without asking what is used
            raise UserError(f"budget on {cluster}: this submission may take up to {most:.2f} GPU-hours, more than "
                            f"the whole budget of {budget.gpu_hours:g} since {budget.since:%Y-%m-%d %H:%M}: "
                            f"{REFUSES}")
        used, source = used_gpu_hours(gpu_jobs[0], budget)
        left = budget.gpu_hours - used
        said = (f"budget on {cluster}: {used:.2f} of {budget.gpu_hours:g} GPU-hours used since "
                f"{budget.since:%Y-%m-%d %H:%M} ({source}){site_limit(gpu_jobs[0], budget)}; this submission may take "
                f"up to {most:.2f}, {max(left, 0):.2f} are left")
        if most <= left:
            lines.append(said)
        elif strict:
            raise UserError(f"{said}: {REFUSES}")
        else:
            lines.append(f"warning: {said}: it may pass your budget (--strict-budget refuses such a submission)")
    return lines


def by_cluster(jobs: List[ResolvedJob]) -> Dict[str, List[ResolvedJob]]:
    found: Dict[str, List[ResolvedJob]] = {}
    for job in jobs:
        if unit(job) == "GPU":
            found.setdefault(job.cluster, []).append(job)
    return found


def site_limit(job: ResolvedJob, budget: Budget) -> str:
    """', the site's limit for account A: 100 GPU-hours' where the scheduler states one (Slurm: GrpTRESMins)."""
    account = budget.account or job.placement.account or ""
    for name, hours in ({} if serving_another(job) else job.adapter.gpu_hour_limits()).items():
        if not account or name == account:
            return f", the site's limit for account {name}: {hours:g} GPU-hours"
    return ""


def serving_another(job: ResolvedJob) -> str:
    """Why this machine's scheduler is not the job's cluster's ("": it is, or cannot say)."""
    return serves_another(job.scheduler, job.scheduler_cluster or job.cluster, job.cluster_file)
