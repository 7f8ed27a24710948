"""The host side stays a set of rooms a newcomer can read (issue 25): short functions, short modules, and no import
circle, neither between modules nor between the rooms (cluster_train/host/<room>/) they sit in. And cluster_train/ is
three layers named by where the code runs (issue 40): cluster_train/host/ (login node), cluster_train/shared/
(torch-free, both sides), cluster_train/image/ (inside the image); the host imports only the shared layer, which imports
neither side."""
import ast
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Set

from conftest import ROOT

from cluster_train.host.layers import LAYERS

HOST = ROOT / "cluster_train" / "host"
MAX_FUNCTION_LINES = 50
MAX_MODULE_LINES = 300


def modules(root: Path = ROOT) -> Dict[str, Path]:
    """Dotted name -> file, for every module of cluster_train/host (a package by its own name)."""
    found = {}
    for path in sorted((root / "cluster_train" / "host").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: Dict[str, Path]) -> Set[str]:
    """The cluster_train.host modules module `name` imports: at module level, inside a function and under
    TYPE_CHECKING alike (a lazy import is a dependency all the same: postponing it hides a circle, it does not break
    one). `from PACKAGE import MODULE` depends on MODULE, not on the package's __init__.py."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            submodules = {f"{source}.{alias.name}" for alias in node.names} & known.keys()
            out.update(submodules if len(submodules) == len(node.names) else submodules | {source})
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {module for module in out if module in known}


def room(module: str) -> str:
    """cluster_train.host.jobs.build -> cluster_train.host.jobs; a
    module at the top of cluster_train/host is a room of its own."""
    return ".".join(module.split(".")[:3])


def upward(root: Path = ROOT) -> List[str]:
    """Each import of a module into a room of a higher layer than its own (cluster_train/host/layers.py), as
    'importer -> imported'."""
    level = {f"cluster_train.host.{name}": i for i, rooms in enumerate(LAYERS) for name in rooms}
    known = modules(root)
    return [f"{name} -> {target}" for name, path in known.items() for target in sorted(imported(name, path, known))
            if level.get(room(target), -1) < level.get(room(name), -1) and room(target) != room(name)]


def test_every_import_goes_to_its_own_room_or_a_lower_layer():
    """The rooms' order (issue 57): an import that runs upward, even inside a function or under TYPE_CHECKING, is a
    circle in waiting, so every room has one layer and imports only downward or within its layer."""
    placed = [name for rooms in LAYERS for name in rooms]
    # host/__init__.py (the side's docstring) and layers.py (this order, read by the tests) are no rooms
    rooms = {room(name).rpartition(".")[2] for name in modules()} - {"host", "layers"}
    assert len(placed) == len(set(placed)) and set(placed) == rooms
    assert upward() == []


def test_an_upward_lazy_import_across_the_rooms_is_found(tmp_path):
    host = tmp_path / "cluster_train" / "host"
    for name in ("__init__.py", "jobs/__init__.py", "jobs/build.py", "schedulers/__init__.py"):
        (host / name).parent.mkdir(parents=True, exist_ok=True)
        (host / name).write_text("")
    (host / "schedulers" / "lazy.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from cluster_train.host.jobs.build import Job\n\n\n"
        "def f():\n    from cluster_train.host import jobs\n")
    assert upward(tmp_path) == ["cluster_train.host.schedulers.lazy -> cluster_train.host.jobs",
                                "cluster_train.host.schedulers.lazy -> cluster_train.host.jobs.build"]


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected groups of more than one node (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_function_over_50_lines_and_no_module_over_300():
    long = []
    for name, path in modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long.append(f"{name}: {len(text.splitlines())} lines")
        long += [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(ast.parse(text))
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_import_circle_between_modules_or_rooms():
    known = modules()
    graph = {name: imported(name, path, known) - {name} for name, path in known.items()}
    rooms: Dict[str, Set[str]] = {}
    for name, targets in graph.items():
        rooms.setdefault(room(name), set()).update(room(t) for t in targets if room(t) != room(name))
    # cluster_train/host/__init__.py, the docstring every module's import passes through
    rooms.pop("cluster_train.host", None)
    assert circles(graph) == [] and circles(rooms) == []


# What only the image has: a module that imports one of these, even inside a function, runs only in the image.
IMAGE_ONLY = {"torch", "torchvision", "pytorch_lightning", "lightning", "lightning_fabric", "deepspeed", "numpy"}
# Which layers each layer may import from cluster_train/ (train itself: the package's docstring and version).
MAY_IMPORT = {"host": {"host", "shared"}, "shared": {"shared"}, "image": {"shared", "image"}}


def every_import(path: Path) -> Set[str]:
    """Every absolute module a file imports, at module level or inside a function (a lazy import is a dependency
    all the same: the function fails on a machine without it)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def crossings(layer: str, root: Path = ROOT) -> List[str]:
    """The imports of train/<layer>/ that go where the layer may not."""
    found = []
    for path in sorted((root / "cluster_train" / layer).rglob("*.py")):
        for name in sorted(every_import(path)):
            parts = name.split(".")
            wrong_layer = parts[0] == "cluster_train" and len(parts) > 1 and parts[1] not in MAY_IMPORT[layer]
            if wrong_layer or (layer != "image" and parts[0] in IMAGE_ONLY):
                found.append(f"{path.relative_to(root)} imports {name}")
    return found


def test_train_is_three_layers_and_only_the_image_imports_torch():
    assert sorted(p.name for p in (ROOT / "cluster_train").iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "host", "image", "shared"]
    assert crossings("host") == [] and crossings("shared") == [] and crossings("image") == []


def test_a_lazy_import_across_the_layers_is_found(tmp_path):
    module = tmp_path / "cluster_train" / "shared" / "lazy.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    import torch\n    from cluster_train.image import fit\n")
    assert crossings("shared", tmp_path) == ["cluster_train/shared/lazy.py imports cluster_train.image",
                                             "cluster_train/shared/lazy.py imports torch"]


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_top_level_folder_shares_a_name_with_a_module_of_train():
    """bench/ beside cluster_train/image/bench.py read as one thing in two places (issue 40): the benchmarks live in
    benchmarks/, and `make bench` and its siblings still find their scripts there."""
    modules_of_train = {path.stem for path in (ROOT / "cluster_train").iterdir() if path.suffix == ".py"
                        or path.is_dir()}
    tracked = subprocess.run(["git", "ls-tree", "-d", "--name-only", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert set(tracked) & modules_of_train == set()
    targets = ["bench", "bench-threads", "bench-sweeps", "bench-data", "bench-loop", "bench-container", "bench-cli",
               "bench-rank-start"]
    planned = subprocess.run(["make", "-n", *targets], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert planned.returncode == 0, planned.stderr
    assert all((ROOT / script).is_file() for script in re.findall(r"\bbenchmarks/\w+\.py", planned.stdout))


# an argv that starts with apptainer, a search for it, or doctor's Tools.exe (apptainer's path) starting a list
APPTAINER_CALL = re.compile(r"""\[\s*["']apptainer["']\s*,|which\(\s*["']apptainer["']|\[\s*tools\.exe\b""")


def test_every_apptainer_call_goes_through_the_adapter():
    """Apptainer was called from 8 modules, each with its own 'not on PATH' line (issue 40): only
    cluster_train/host/apptainer.py may start it, so a missing or too-old binary is said once, the same way."""
    adapter = HOST / "apptainer.py"
    callers = [f"{path.relative_to(ROOT)}:{number}" for path in sorted(HOST.rglob("*.py")) if path != adapter
               for number, text in enumerate(path.read_text().splitlines(), 1) if APPTAINER_CALL.search(text)]
    assert callers == []
