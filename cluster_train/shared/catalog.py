"""Every name a run config can hold, by registry, known without torch: the login node checks a run against these
before queueing it (`bin/run-cluster names` prints describe()).

REGISTRIES maps a display name (as Registry.names_in refers to it) to its registry, in display order.
"""
from typing import Dict

from cluster_train.shared.data import DATASETS
from cluster_train.shared.models import FUSION_HEADS, MODELS
from cluster_train.shared.optimizers import LR_SCHEDULERS, OPTIMIZERS
from cluster_train.shared.registry import NOT_LITERAL, REQUIRED, Registry
from cluster_train.shared.strategies import PRECISION_NAMES, STRATEGIES
from cluster_train.shared.tasks import TASKS

REGISTRIES: Dict[str, Registry] = {
    "models": MODELS,
    "fusion heads": FUSION_HEADS,
    "data sets": DATASETS,
    "tasks": TASKS,
    "strategies": STRATEGIES,
    "optimizers": OPTIMIZERS,
    "schedulers": LR_SCHEDULERS,
    "precisions": PRECISION_NAMES,
}
# Which run config key holds a name of which registry.
CONFIG_KEYS = {"model.name": "models", "data.name": "data sets", "task": "tasks", "trainer.strategy": "strategies",
               "optim.name": "optimizers", "optim.scheduler": "schedulers", "trainer.precision": "precisions"}
# Where each registry's params come from in a run config (registries not listed take none from the user).
PARAMS_KEYS = {"models": "model.params", "data sets": "data.params", "tasks": "task_params"}


def describe() -> str:
    """Every registry's names, one line each; models, data sets and tasks with their parameters and defaults."""
    lines = []
    for title, registry in REGISTRIES.items():
        if title in PARAMS_KEYS:
            lines.append(f"{title} ({PARAMS_KEYS[title]}):")
            lines += [f"  {name}{_params_text(registry, name)}" for name in registry.names()]
        else:
            lines.append(f"{title}: {', '.join(registry.names())}")
    return "\n".join(lines)


def _params_text(registry: Registry, name: str) -> str:
    params = registry.params(name)
    if params is None:
        return " (any keyword)"
    if not params:
        return ""
    return "  " + ", ".join(f"{key}={_default(value)}" for key, value in params.items())


def _default(value) -> str:
    if value is REQUIRED:
        return "<required>"
    if value is NOT_LITERAL:
        return "<computed>"
    return repr(value)
