"""Your GPU-hour budget through the API: the command line's own check (cluster_train/host/runs/budget.py), called
by every submit, sweep and rerun of a Job (Job(..., strict_budget=True) refuses as --strict-budget does) and shown by
their dry runs. Its warnings go through Python's `warnings` as BudgetWarning: the library never prints, and a script
decides what a warning does (shown once, logged, ignored, or an error with `-W error::cluster_train.BudgetWarning`)."""
import warnings
from typing import Any, List, Tuple

from cluster_train.host.api.errors import BudgetWarning
from cluster_train.host.runs import budget
from cluster_train.host.runs.queue import Plan


def budget_lines(jobs: List[Any], strict: bool) -> Tuple[List[str], List[str]]:
    """What runs/budget.check (the command line's own check) says of the jobs: (its lines, its warnings)."""
    said = budget.check(jobs, strict)
    warned = [line for line in said if line.startswith("warning: ")]
    return [line for line in said if line not in warned], warned


def within_budget(plan: Plan, strict: bool) -> None:
    """Before a submit queues `plan`: over the budget with `strict`, refused in the command line's words; else a
    BudgetWarning (warnings.warn, never printed by the library: a script filters it, logs it, or makes it an error
    with `-W error::cluster_train.BudgetWarning`)."""
    for line in budget_lines(plan.jobs, strict)[1]:
        warnings.warn(line.removeprefix("warning: "), BudgetWarning, stacklevel=3)
