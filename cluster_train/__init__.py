"""cluster-train: one training code base, any GPU cluster.

`import cluster_train as ct` gives the Python API (`ct.Job`, `ct.Run`, `ct.ClusterTrainError`, ...:
cluster_train/host/api), loaded on first use (PEP 562), so `python -m train` inside the image imports nothing of the
login-node side. `cluster_train.host` (torch-free) resolves, checks, renders and submits jobs on a login node;
the rest runs inside the image (`python -m train ...`).
"""
from typing import TYPE_CHECKING, Any, List

__version__ = "0.1.0"

if TYPE_CHECKING:  # what a type checker and an editor see; at run time the names load on first use
    from cluster_train.host.api import *  # noqa: F401,F403


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from cluster_train.host import api

    if name not in api.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(api, name)


def __dir__() -> List[str]:
    from cluster_train.host import api

    return sorted({*globals(), *api.__all__})
