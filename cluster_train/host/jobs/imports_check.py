"""A command's imports against the image, before anything is queued: a package the image lacks would otherwise be
found only when the job started, after its wait in the queue (`ModuleNotFoundError: No module named 'timm'`).

The command's script (its first `.py` argument, and a `-m MODULE` of the snapshot) is parsed, never run: each
`import x` / `from x import y` gives its top-level name x: one at the script's top level (what runs when it
starts) must be in the image, or the run is refused; one inside a function or class body (a lazy import, maybe never
reached) the image lacks is a warning. Left out: relative
imports, the standard library (this Python's sys.stdlib_module_names), names the code snapshot provides itself (any
directory or .py file of it), and imports that say they may fail (inside `try:` with an ImportError handler, or
`if TYPE_CHECKING:`). What is left must be in the image's module list, which its build records in the label
org.cluster-train.modules (containers/install.sh; cluster_train/image/modules.py). An image without that label (one
built before it, or the test stand-ins) gets a warning naming the imports not checked, never a refusal.
"""
import ast
import os
import sys
import tarfile
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.clusters.flavors import make_image
from cluster_train.host.images import sif, store
from cluster_train.host.jobs import code_snapshot, user_code
from cluster_train.host.jobs.code_snapshot import Snapshot
from cluster_train.host.scheduling.job import ImageRef

MODULES_LABEL = "org.cluster-train.modules"
MAY_FAIL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset(sys.builtin_module_names) | {"__future__"}


def check(command: List[str], snapshot: Snapshot, image: ImageRef) -> List[str]:
    """Warnings (the image records no module list); raises one UserError naming every import the image lacks."""
    script, source = command_source(command, snapshot)
    if source is None:
        return []
    local = snapshot_names(snapshot)
    top, lazy = (({name: line for name, line in found.items() if name not in STDLIB | local})
                 for found in imports(source, script))
    wanted = {**lazy, **top}
    if not wanted or not image.path or not Path(image.path).is_file():
        return []  # nothing to check, or no image here yet (preflight says so itself)
    shown = f"the {image.flavor} image sha256:{image.sha256[:12]}"
    has = image_modules(image.path, image.sha256)
    if not has:
        return [f"warning: {shown} records no list of its modules (built before the list was); the imports of "
                f"{script} ({', '.join(sorted(wanted))}) were not checked against it: rebuild it "
                f"({make_image(store.base_flavor(image.flavor))}) to have them checked before queueing"]
    missing = sorted((line, name) for name, line in top.items() if name not in has)
    if missing:
        raise UserError(f"command: {lacking(script, missing, image)}")
    maybe = sorted((line, name) for name, line in lazy.items() if name not in has)
    return [f"warning: inside a function, {lacking(script, maybe, image)} (the job fails if that code runs)"] if maybe \
        else []


def lacking(script: str, missing: List[Tuple[int, str]], image: ImageRef) -> str:
    """'train.py imports timm (line 3), which the cpu image ... does not have; put the package ... +NAME'"""
    names = ", ".join(f"{name} (line {line})" for line, name in missing)
    base = store.base_flavor(image.flavor)
    return (f"{script} imports {names}, which the {image.flavor} image sha256:{image.sha256[:12]} does not "
            f"have; put the package that provides {'it' if len(missing) == 1 else 'each'} in requirements.in, "
            f"then make lock-derived REQS=requirements.in FLAVOR={base} and bin/run-cluster images derive NAME "
            f"--from {image.flavor} --requirements requirements.lock, and run with --flavor {base}+NAME")


def command_source(command: List[str], snapshot: Snapshot) -> Tuple[str, Optional[str]]:
    """(the script's name, its text) for a .py script of the snapshot or a `-m MODULE` that is one; else ("", None)."""
    script = user_code.script_of(command)
    if not script.endswith(".py"):
        words = [str(w) for w in command]
        module = words[words.index("-m") + 1] if "-m" in words[:-1] else ""
        candidates = [module.replace(".", "/") + ".py", module.replace(".", "/") + "/__main__.py"] if module else []
        script = next((c for c in candidates if code_snapshot.holds(snapshot, c)), "")
    if not script or os.path.isabs(script):
        return "", None
    return script, code_snapshot.read_text(snapshot, script)


def imports(source: str, script: str) -> Tuple[Dict[str, int], Dict[str, int]]:
    """(top level, lazy: only inside a function or class body): top-level name -> first line, of every absolute
    import that is not allowed to fail; nothing for a file Python cannot parse (Python itself says why when it runs,
    and the host's Python may be older than the image's)."""
    try:
        tree = ast.parse(source, filename=script)
    except (SyntaxError, ValueError):
        return {}, {}
    top: Dict[str, int] = {}
    lazy: Dict[str, int] = {}
    for node, in_body in sorted(required_imports(tree), key=lambda found: found[0].lineno):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            names = [node.module] if node.module and not node.level else []
        for name in names:
            (lazy if in_body else top).setdefault(name.split(".")[0], node.lineno)
    return top, {name: line for name, line in lazy.items() if name not in top}


BODIES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def required_imports(tree: ast.AST) -> List[Tuple[ast.stmt, bool]]:
    """Import statements anywhere in the tree, each with whether it is inside a function or class body, less those
    under an ImportError handler or `if TYPE_CHECKING:`."""
    found, todo = [], [(tree, False)]
    while todo:
        node, in_body = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((node, in_body))
            continue
        if isinstance(node, BODIES):
            todo += [(child, True) for child in ast.iter_child_nodes(node)]
            continue
        if isinstance(node, ast.Try) and may_fail(node):
            todo += [(n, in_body) for n in node.handlers + node.orelse + node.finalbody]  # the try body's: optional
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            todo += [(n, in_body) for n in node.orelse]
            continue
        todo += [(child, in_body) for child in ast.iter_child_nodes(node)]
    return found


def may_fail(node: ast.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if caught is None or any(getattr(n, "id", getattr(n, "attr", "")) in MAY_FAIL for n in names):
            return True
    return False


def snapshot_names(snapshot: Snapshot) -> Set[str]:
    """Every name the snapshot could provide as a module: its directories' names and its .py/.so files' stems (the
    script's directory, the code directory or a sys.path a script adds itself may hold them)."""
    names: Set[str] = set()
    with tarfile.open(snapshot.tar_path) as tar:
        listed = tar.getnames()
    for path in listed:
        parts = PurePosixPath(path).parts
        names |= set(parts[:-1])
        if parts and parts[-1].endswith((".py", ".so")):
            names.add(parts[-1].split(".")[0])
    return names


@lru_cache(maxsize=16)
def image_modules(path: str, sha256: str) -> FrozenSet[str]:
    """The image's module list from its label (apptainer inspect, milliseconds); empty where it has none or its
    labels cannot be read. Kept per image for the process: a sweep checks many jobs on one image."""
    try:
        labels = sif.sif_labels(Path(path), f"image sha256:{sha256[:12]}")
    except (UserError, OSError):  # no apptainer on this machine, or not a SIF: nothing recorded to go by
        return frozenset()
    return frozenset(str(labels.get(MODULES_LABEL, "")).split())
