"""Issue 9: every name is known on the host without torch, and cluster_train/ stays a package without import circles.

No torch needed here: these run in the host venv and anywhere the login-node code runs.
"""
import ast
import subprocess
import sys

import pytest

from conftest import ROOT
from cluster_train.shared.errors import UserError

TRAIN = ROOT / "cluster_train"
# every module of the shared layer, which the login node imports (tests/test_layout.py holds the layers apart)
TORCH_FREE = sorted(f"cluster_train.shared.{p.stem}" for p in (TRAIN / "shared").glob("*.py") if p.stem != "__init__")
MAX_LINES = 400


def test_registries_their_names_and_params_import_no_torch():
    code = (
        f"import sys\nimport {', '.join(TORCH_FREE)}\n"
        "from cluster_train.shared.catalog import REGISTRIES, describe\n"
        "for r in REGISTRIES.values():\n"
        "    for n in r.names():\n"
        "        r.check(n); r.params(n); r.names_in(n)\n"
        "describe()\n"
        "heavy = sorted(m for m in ('torch', 'pytorch_lightning', 'lightning_fabric', 'numpy') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_catalog_lists_every_registry_in_display_order():
    from cluster_train.shared.catalog import REGISTRIES, describe

    assert list(REGISTRIES) == ["models", "fusion heads", "data sets", "tasks", "strategies", "optimizers",
                                "schedulers", "precisions"]
    assert REGISTRIES["optimizers"].names() == ["adamw", "sgd"]
    assert REGISTRIES["schedulers"].names() == ["cosine", "none"]
    assert set(REGISTRIES["precisions"].names()) == {"auto", "32", "16-mixed", "bf16-mixed"}
    assert {"multiplicative", "multiplicativeAddition", "TransformerBase", "concatenation"} == set(
        REGISTRIES["fusion heads"].names())
    text = describe()
    for title, registry in REGISTRIES.items():
        assert title in text and all(name in text for name in registry.names())
    assert "resnet_cifar  depth=20, width=16" in text and "experts_dir=<required>" in text


@pytest.mark.parametrize("title, bad, hint",
                         [("models", "resnet_cifr", "resnet_cifar"), ("optimizers", "adamm", "adamw"),
                                              ("fusion heads", "multiplicativ", "multiplicative"),
                                              ("precisions", "bf16_mixed", "bf16-mixed"),
                                              ("tasks", "clasify", "classify")])
def test_an_unknown_name_is_refused_with_a_hint(title, bad, hint):
    from cluster_train.shared.catalog import REGISTRIES

    registry = REGISTRIES[title]
    assert bad not in registry
    with pytest.raises(UserError,
                       match=f"unknown {registry.kind} '{bad}' \\(did you mean '{hint}'\\?\\); choose one of"):
        registry.check(bad)


def test_params_are_read_from_the_source():
    from cluster_train.shared.catalog import REGISTRIES
    from cluster_train.shared.registry import NOT_LITERAL, REQUIRED

    r = REGISTRIES
    assert r["models"].params("resnet_cifar") == {"depth": 20, "width": 16, "stages": 3}  # num_classes is the caller's
    assert r["models"].params("vgg")["layers"] == (16, "M", 32, "M", 64, 64, "M")
    assert r["models"].params("mobilenet_finetuned")["weights_path"] == "weights/mobilenet_v3_small-047dcff4.pth"
    assert r["models"].names_in("ensemble") == {"members": "models", "member_params": "models"}
    assert r["data sets"].params("ufc10") == {"num_frames": 8} and r["data sets"].params("cifar100") == {}
    assert r["fusion heads"].params("TransformerBase") == {"dim": 64, "heads": 4}
    assert r["strategies"].params("zero3") == {}
    assert r["optimizers"].params("sgd") == {"lr": REQUIRED, "momentum": REQUIRED, "weight_decay": REQUIRED}
    assert r["optimizers"].params("adamw") == {"lr": REQUIRED, "weight_decay": REQUIRED}
    fusion = r["tasks"].params("cifar_fusion")
    assert fusion["experts_dir"] is REQUIRED and fusion["experts_lr"] is NOT_LITERAL and fusion["fusion_dim"] == 64
    assert r["tasks"].names_in("cifar_fusion") == {"fusion": "fusion heads"}
    assert r["tasks"].names_in("video_suite") == {"models": "models"}
    assert r["tasks"].params("classify") == {} and r["tasks"].names_in("classify") == {}


def test_a_kwargs_target_takes_anything(tmp_path, monkeypatch):
    from cluster_train.shared.registry import Registry

    (tmp_path / "ct_probe_module.py").write_text(
        "X = 3\n"
        "def loose(num_classes, **kwargs):\n    pass\n"
        "class Strict:\n    def __init__(self, num_classes, a, b=X, *, c=(1, 'two'), d=len('x')):\n        pass\n"
        "class Child(Strict):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from cluster_train.shared.registry import NOT_LITERAL, REQUIRED

    r = Registry("probe", {"loose": "ct_probe_module:loose", "strict": "ct_probe_module:Strict",
                           "child": "ct_probe_module:Child"}, fixed=("num_classes",))
    assert r.params("loose") is None
    assert r.params("strict") == {"a": REQUIRED, "b": 3, "c": (1, "two"), "d": NOT_LITERAL}
    assert r.params("child") == r.params("strict")
    assert "ct_probe_module" not in sys.modules  # read, never run


def _module_name(path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict:
    """train's modules -> the train modules they import, at module level or inside functions (ast only)."""
    files = {_module_name(p): p for p in TRAIN.rglob("*.py")}
    graph = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the module pkg.sub where there is one, else names from pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_train_has_no_import_circle():
    graph = import_graph()
    assert ("cluster_train.image.tasks.classify" in graph["cluster_train.image.fit"]
            or "cluster_train.shared.tasks" in graph["cluster_train.image.fit"])
    assert "cluster_train.image.trainer" in graph["cluster_train.image.tasks.common"]
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_module_in_train_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in TRAIN.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


def test_master_port_has_one_formula():
    from cluster_train.shared.ports import MASTER_PORT_BASE, MASTER_PORT_SPAN, master_port

    assert master_port(12345) == MASTER_PORT_BASE + 12345 % MASTER_PORT_SPAN == 32345
    assert MASTER_PORT_BASE <= master_port(987654321) < MASTER_PORT_BASE + MASTER_PORT_SPAN
    source = (TRAIN / "image" / "lsf_environment.py").read_text()
    assert "master_port(" in source and "% 20000" not in source
