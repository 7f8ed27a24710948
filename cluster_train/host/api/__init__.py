"""cluster-train's Python API (public as `import cluster_train as ct`): the command line is a thin layer over it.
Torch-free; never prints, never exits: bad input raises ClusterTrainError with the command line's one-line message.

    import cluster_train as ct
    run = ct.Job("ci-slurm", "n1_gpu1", "demo", overrides={"trainer.max_epochs": 1}).submit()

Each name loads its module on first use (PEP 562), so importing the API costs nothing until it is used.
"""
from importlib import import_module
from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:
    from cluster_train.host.api.errors import BudgetWarning, ClusterTrainError, UserErrors
    from cluster_train.host.api.race import first_to_start
    from cluster_train.host.api.job import Job, Rerun, rerun
    from cluster_train.host.api.sweep import Sweep, SweepProgress
    from cluster_train.host.api.values import DryRun
    from cluster_train.host.api.function import Call, Executor, FunctionError, FunctionRun
    from cluster_train.host.api.pipeline import Pipeline
    from cluster_train.host.api.run import Run, RunStatus, State, runs
    from cluster_train.host.api.study import Study, StudyProgress

MODULES: Dict[str, str] = {  # each public name and the module of cluster_train/host/api that defines it
    "ClusterTrainError": "errors", "UserErrors": "errors", "BudgetWarning": "errors", "first_to_start": "race",
    "Job": "job", "Rerun": "job", "DryRun": "values", "Sweep": "sweep", "SweepProgress": "sweep",
    "rerun": "job",
    "Run": "run", "RunStatus": "run", "State": "run", "runs": "run", "Pipeline": "pipeline",
    "Study": "study", "StudyProgress": "study", "Executor": "function", "FunctionRun": "function",
    "FunctionError": "function", "Call": "function",
}

__all__ = sorted(MODULES)


def __getattr__(name: str) -> Any:
    if name not in MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{MODULES[name]}"), name)


def __dir__() -> List[str]:
    return sorted({*globals(), *__all__})
