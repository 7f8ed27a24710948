"""The scheduler adapters, by the cluster file's `scheduler:` word: each owns its scheduler's facts (launch shapes it
supports, time-limit format, log file names, state names mapped onto one `State`, how a job is requeued), its commands
(submit, state, accounting, cancel) and its job-script template (templates/<name>.sh.j2 beside it).

The contract a new scheduler fills in is documented once, on `Scheduler` in base.py; each adapter is its own module
(slurm.py, lsf.py, local.py); cluster_train/host/scheduling/launches.py, below the adapters, is the table of launch
shapes (srun, lightning, blaunch, independent) an adapter names the ones it can start from. Nothing else in `cluster_train/host/` branches on a scheduler's name: it asks
the adapter (`adapter(job.scheduler)`). A site's own adapter, kept outside the project, is loaded by site.py when a
cluster file or a run names it.
"""
from pathlib import Path
from typing import Dict

from cluster_train.shared.errors import UserError
# the vocabulary, re-exported: the rest of cluster_train/host imports everything about schedulers from this package
from cluster_train.host.schedulers.base import (  # noqa: F401
    BUILT_IN, FINISHED, MODULE_NAME, NOT_STARTED, SAFE_NAME, Scheduler, State, run_or_refuse)
from cluster_train.host.schedulers.local import Local
from cluster_train.host.schedulers.lsf import Lsf
from cluster_train.host.schedulers.slurm import Slurm
from cluster_train.shared.registry import unknown_name

# the shared partials (_preamble, _container, _segments), sweep.sh.j2 and the built-in adapters' own templates
SHARED_TEMPLATES = Path(__file__).resolve().parent / "templates"
SCHEDULERS: Dict[str, Scheduler] = {s.name: s for s in (Slurm(), Lsf(), Local())}
assert tuple(SCHEDULERS) == BUILT_IN, "base.BUILT_IN names the adapters listed here"


def register(scheduler: Scheduler) -> Scheduler:
    """Add an adapter defined outside this package (a site's own, or a test's); the built-in ones are listed above."""
    if scheduler.name in SCHEDULERS:
        raise UserError(f"a scheduler named {scheduler.name!r} is already registered")
    SCHEDULERS[scheduler.name] = scheduler
    return scheduler


def adapter(name: str, where: str = "") -> Scheduler:
    """The adapter of the `scheduler:` word `name`: a built-in one, else a site's own (site.py), loaded once."""
    known = SCHEDULERS.get(name) if isinstance(name, str) else None
    if known is None and isinstance(name, str) and name:
        from cluster_train.host.schedulers import site  # only for a name not built in: it may scan installed packages

        known = site.find(name, BUILT_IN)
        if known is not None:
            SCHEDULERS[name] = known  # loaded once per process: a status of many runs imports it once
    if known is None:
        said = unknown_name("scheduler", name, sorted(SCHEDULERS))
        raise UserError(f"{where + ': ' if where else ''}{said}, or add your site's own "
                        f"(docs/how-to/add-scheduler.md#your-sites-own-scheduler)")
    return known


def serves_another(scheduler: str, cluster: str, path: str) -> str:
    """Why this machine's `scheduler` is not asked about `cluster` (its scheduler's name for it, from the cluster
    file at `path`): it serves another cluster, whose answers (a script's verdict, its partitions, its limits) would be
    taken for this one's; "" where it serves this one, or cannot say which one it serves."""
    here = adapter(scheduler).cluster_here()
    if here is None or here.lower() == cluster.lower():  # Slurm maps a ClusterName to lower case
        return ""
    return (f"this machine's {adapter(scheduler).title} serves cluster {here!r}, not {cluster!r}, so it is not "
            f"asked; if it is that cluster, set scheduler_cluster: {here} in {path}")
