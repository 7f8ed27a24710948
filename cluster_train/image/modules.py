"""The top-level module names this image's Python can import, printed as one line (`python -m
cluster_train.image.modules`).

containers/install.sh (and containers/derived.def.j2 for a derived image) writes the line into the image's label
org.cluster-train.modules at build time, so that the login node, which has neither the image's Python nor torch,
checks a command's imports against it before anything is queued (cluster_train/host/jobs/imports_check.py) by
reading the label in milliseconds (`apptainer inspect`). Stdlib only, and Python 3.8 (the cuda11.6 image):
importlib.metadata.packages_distributions() and sys.stdlib_module_names are 3.10+, so both are done by hand here.
"""
import importlib.metadata as metadata
import pkgutil
import sys
from pathlib import PurePosixPath
from typing import Iterable, Set

NOT_MODULES = (".dist-info", ".egg-info", ".data", ".libs")  # what a distribution installs beside its modules


def importable() -> Set[str]:
    """Every top-level name `import NAME` finds: built-ins, the standard library, each sys.path entry's modules and
    packages, and what each installed distribution declares (namespace packages have no __init__ for pkgutil)."""
    names = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
    names |= {found.name for found in pkgutil.iter_modules()}
    for dist in metadata.distributions():
        names |= top_level(dist)
    return {name for name in names if name.isidentifier()}


def top_level(dist: metadata.Distribution) -> Set[str]:
    """A distribution's top-level modules: its top_level.txt, else the first part of each file it installed."""
    declared = dist.read_text("top_level.txt")
    if declared:
        return set(declared.split())
    return set(first_parts(str(f) for f in dist.files or ()))


def first_parts(paths: Iterable[str]) -> Iterable[str]:
    for path in paths:
        parts = PurePosixPath(path).parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(NOT_MODULES):
            continue
        if len(parts) > 1:
            yield parts[0]
        elif parts[0].endswith((".py", ".so", ".pyd")):
            yield parts[0].split(".")[0]  # mod.py, _ext.cpython-313-x86_64-linux-gnu.so


if __name__ == "__main__":
    print(" ".join(sorted(importable())))
