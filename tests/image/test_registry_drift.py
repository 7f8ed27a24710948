"""The lazy registry tables against the code they point at (needs torch): every target imports and is callable, the
parameters read from source (what the login node checks) equal what inspect.signature gives, and every task declares
exactly the task_params keys its module reads. Also run inside the image (tests/image/test_in_image.py)."""
import ast
import importlib.util
import inspect

import pytest

pytest.importorskip("torch")

from cluster_train.shared.catalog import REGISTRIES  # noqa: E402
from cluster_train.shared.data import GENERATORS  # noqa: E402
from cluster_train.shared.registry import NOT_LITERAL, REQUIRED  # noqa: E402

# make test runs this module inside the image (test_in_image.py), by the torch and torchvision jobs use, and
# not again here; make test-fast runs it here
pytestmark = pytest.mark.image_copy

ALL = dict(REGISTRIES, **{"data generators": GENERATORS})
ENTRIES = [(title, name) for title, registry in ALL.items() for name in registry.names()
           if registry.target(name)]  # precisions are names only


def real_params(fn, fixed):
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name: p.default for p in params if p.kind is not p.VAR_POSITIONAL and p.name not in fixed}


@pytest.mark.parametrize("title, name", ENTRIES)
def test_every_entry_imports_is_callable_and_takes_the_params_read_from_its_source(title, name):
    registry = ALL[title]
    fn = registry.get(name)
    assert callable(fn), f"{title} {name!r} -> {registry.target(name)} is not callable"
    real = real_params(fn, registry.fixed)
    for arg in registry.fixed:
        assert arg in inspect.signature(fn).parameters, f"{name!r} does not take the fixed argument {arg!r}"
    if title == "tasks":
        assert real == {}, f"a task takes only the run: {real}"
        return
    read = registry.params(name)
    if real is None:
        assert read is None
        return
    assert read is not None and list(read) == list(real), f"{title} {name!r}: source says {read}, signature {real}"
    for key, default in read.items():
        if default is REQUIRED:
            assert real[key] is inspect.Parameter.empty, (name, key)
        elif default is NOT_LITERAL:
            assert real[key] is not inspect.Parameter.empty, (name, key)
        else:
            assert default == real[key] and type(default) is type(real[key]), (name, key, default, real[key])


def task_params_read(module: str) -> set:
    """The task_params keys a task module reads: `run.task_params.get("k")`, `[...]["k"]`, `"k" in ...`, also
    through a local name bound to run.task_params (e.g. `p, out = run.task_params, ...`)."""
    tree = ast.parse(open(importlib.util.find_spec(module).origin).read())
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
            for target, value in list(pairs):
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    pairs += list(zip(target.elts, value.elts))
            aliases |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _is_task_params(v, set())}
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and _is_task_params(node.func.value, aliases):
            keys.add(ast.literal_eval(node.args[0]))
        elif isinstance(node, ast.Subscript) and _is_task_params(node.value, aliases):
            keys.add(ast.literal_eval(node.slice))
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and _is_task_params(node.comparators[0], aliases):
            keys.add(ast.literal_eval(node.left))
    return keys


def _is_task_params(node, aliases) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "task_params") or (
        isinstance(node, ast.Name) and node.id in aliases)


@pytest.mark.parametrize("name", REGISTRIES["tasks"].names())
def test_every_task_declares_exactly_the_task_params_it_reads(name):
    tasks = REGISTRIES["tasks"]
    module = tasks.target(name).partition(":")[0]
    declared = tasks.params(name)
    assert declared is not None, f"{module} has no PARAMS"
    assert task_params_read(module) == set(declared), f"{module}: reads {task_params_read(module)}, PARAMS {declared}"


@pytest.mark.parametrize("title, name", [(t, n) for t, n in ENTRIES if ALL[t].names_in(n)])
def test_params_holding_names_point_at_registries_and_default_to_known_names(title, name):
    registry = ALL[title]
    params = registry.params(name)
    for key, other in registry.names_in(name).items():
        assert other in REGISTRIES, f"{name}.{key} names the unknown registry {other!r}"
        default = params[key]
        if default in (None, REQUIRED, NOT_LITERAL):
            continue
        names = [default] if isinstance(default, str) else list(default)
        for value in names:
            REGISTRIES[other].check(value)


def test_task_param_test_sees_aliases():
    import cluster_train.image.tasks.cifar_fusion as module

    assert {"experts_dir", "fusion", "fusion_dim"} <= task_params_read(module.__name__)
