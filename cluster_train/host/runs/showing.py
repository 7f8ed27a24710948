"""The command line's one "show, then queue unless --dry-run, then follow" path for every command that queues (a run,
a rerun, a resume, a sweep, a race of two profiles): the library makes the Plan
(cluster_train/host/runs/queue.py), this prints it."""
import sys
from typing import Optional

from cluster_train.host.runs import budget
from cluster_train.host.runs.queue import Plan
from cluster_train.host.runs.waiting import follow_plan


def show_and_queue(plan: Plan, dry_run: bool, wait: Optional[bool], timeout_s: float,
                   strict_budget: bool = False) -> int:
    print(plan.summary)
    said = budget.check(plan.jobs, strict_budget)
    for warning in dict.fromkeys([*plan.warnings, *(line for line in said if line.startswith("warning: "))]):
        print(f"run-cluster: {warning}", file=sys.stderr)
    for line in said:
        if not line.startswith("warning: "):
            print(line)
    if dry_run:
        plan.discard()
        estimate = plan.start_estimate()
        if estimate:
            print(estimate)
        print(plan.dry_run_text, end="")
        return 0
    queued = plan.queue()
    for line in plan.said(queued):
        print(line)
    if plan.followed and (wait if wait is not None else plan.follow_by_default):
        return follow_plan(plan.followed(queued), timeout_s)
    return 0
