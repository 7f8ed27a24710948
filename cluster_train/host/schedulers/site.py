"""A site's own scheduler adapters, from outside the project: a `schedulers:` entry of the user's settings
(`pbs: /path/to/my_pbs.py` or `pbs: my_site.pbs:Pbs`), else an installed package's entry point in the group
`cluster_train.schedulers` (`pbs = my_site.pbs:Pbs`, as TorchX's `torchx.schedulers`).

Looked for only when a cluster file or a run names a scheduler that is not built in: scanning entry points reads
every installed distribution's metadata, which no command that names slurm, lsf or local should pay for.
"""
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.schedulers.base import Scheduler
from cluster_train.host import settings

GROUP = "cluster_train.schedulers"
FIX = "fix it, or remove it"


def find(name: str, built_in) -> Optional[Scheduler]:
    """The site's adapter named `name` (settings first: the user's own choice), or None where neither names it."""
    target, where = settings.site_scheduler(name)
    if target:
        return _adapter(name, target, f"{where}: schedulers: {name}", built_in)
    return _from_entry_points(name, built_in)


def _from_entry_points(name: str, built_in) -> Optional[Scheduler]:
    from importlib.metadata import entry_points  # its import and scan cost time: only for a name not built in

    points = entry_points()
    found = points.select(group=GROUP) if hasattr(points, "select") else points.get(GROUP, ())  # 3.9: a dict
    for point in found:  # every one, before any is picked: a built-in name must not wait for its turn to be seen
        if point.name in built_in:
            raise UserError(f"{_where(point)} reuses the built-in scheduler name {point.name!r}; rename it in that "
                            f"package")
    point = next((point for point in found if point.name == name), None)
    return _adapter(name, point.value, _where(point), built_in) if point else None


def _where(point) -> str:
    return f"entry point '{point.name} = {point.value}' of package {_package(point)} (group {GROUP})"


def _package(point) -> str:
    dist = getattr(point, "dist", None)  # Python 3.10+: the distribution that declares it
    return f"{dist.metadata['Name']} {dist.version}" if dist is not None else "(unknown)"


def _adapter(name: str, target: str, where: str, built_in) -> Scheduler:
    """The Scheduler that `target` (MODULE[:ATTR] or FILE.py[:ATTR]) names, checked: a one-line refusal otherwise."""
    source, _, attr = target.rpartition(":") if target.count(":") else (target, "", "")
    try:
        module = _import(source, name)
    except Exception as err:  # any failure of someone else's code: say where it came from, not a traceback
        raise UserError(f"{where}: cannot import {source!r} ({type(err).__name__}: {_one_line(err)}); {FIX}") from None
    found = getattr(module, attr, None) if attr else _class_named(module, name)
    if isinstance(found, type) and issubclass(found, Scheduler):
        found = found()
    if not isinstance(found, Scheduler):
        what = f"{attr!r} in {source!r}" if attr else f"{source!r}: no Scheduler subclass with name = {name!r} in it"
        raise UserError(f"{where}: {what} is not a scheduler adapter (a subclass of "
                        f"cluster_train.host.schedulers.base.Scheduler); {FIX}")
    if found.name != name:
        taken = " (a built-in scheduler's)" if found.name in built_in else ""
        raise UserError(f"{where}: its adapter's name is {found.name!r}{taken}, not {name!r}; make them one name")
    return found


def _import(source: str, name: str) -> Any:
    if not source.endswith(".py"):
        return importlib.import_module(source)
    path = Path(source).expanduser()
    spec = importlib.util.spec_from_file_location(f"cluster_train_site_{name}", path)
    if spec is None or not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # template_dir() finds the adapter's templates/ through its module
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ left beside a site's file
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name)
        raise
    finally:
        sys.dont_write_bytecode = writes
    return module


def _class_named(module: Any, name: str) -> Optional[type]:
    """A file or module named without `:ATTR`: its Scheduler subclass whose `name` is the one asked for."""
    return next((value for value in vars(module).values() if isinstance(value, type) and issubclass(value, Scheduler)
                 and getattr(value, "name", None) == name), None)


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else ""
