"""The API's errors: ClusterTrainError is the command line's one error type (bad input, a refused check), its message
the one line `run-cluster` prints after "run-cluster: error: "; several problems found at once come as UserErrors,
one line each in `.problems`. Nothing was queued or written when one is raised."""
from cluster_train.shared.errors import UserError, UserErrors

ClusterTrainError = UserError


class BudgetWarning(UserWarning):
    """A submission that may pass your GPU-hour budget (runs/budget.py), issued through `warnings` by submit() and
    sweep(): Job(..., strict_budget=True) refuses it instead, as the command line's --strict-budget does."""


__all__ = ["BudgetWarning", "ClusterTrainError", "UserErrors"]
