"""Name -> constructor registries (models, fusion heads, data sets, tasks, strategies, optimizers, ...).

Like torchtitan's, a registry is a lazy table: name -> "module.path:attribute". Its names, and each entry's
parameters, are known without importing the module (so without torch): `params` reads the target's source with
`ast`. The module is imported only when an entry is fetched (`get`) or built (`build`).

Parameters are the target's keyword arguments (a function's signature, or a class's `__init__`), minus `self` and
minus `fixed` (the arguments the caller always passes itself, such as `num_classes` for models), each with its
default: a Python literal, REQUIRED (no default) or NOT_LITERAL (an expression). A target taking `**kwargs`
accepts anything: `params` is None.

A module may declare which parameters hold names of another registry, as a module-level literal
`PARAM_NAMES = {"<attribute>": {"<param>": "<registry display name>"}}` (a task module, which holds one task, maps
params directly: `PARAM_NAMES = {"<param>": "<registry>"}`). A string value is one name, a list's items and a
dict's keys are names.
"""
import ast
import difflib
import importlib
import importlib.util
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from cluster_train.shared.errors import UserError


class _Mark:
    """A default that is not a plain value (REQUIRED, NOT_LITERAL); compares by identity, prints its name."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return self.name  # pickles as the module attribute of the same name: still the same object


REQUIRED = _Mark("REQUIRED")  # the parameter has no default: the caller must set it
NOT_LITERAL = _Mark("NOT_LITERAL")  # the default is an expression (computed at run time), not a literal


class Registry:
    def __init__(self, kind: str, entries: Mapping[str, str] = {}, fixed: Sequence[str] = ()):
        self.kind = kind  # singular, as error messages say it: "unknown model 'resnet_cifr'"
        self.fixed = tuple(fixed)
        self._targets: Dict[str, str] = dict(entries)  # name -> "module.path:attribute" ("" for a bare name)
        self._loaded: Dict[str, Callable] = {}
        self._params: Dict[str, Optional[Dict[str, Any]]] = {}

    # ---- torch-free: names, checks, parameters ----
    def names(self) -> List[str]:
        return sorted(set(self._targets) | set(self._loaded))

    def __contains__(self, name) -> bool:
        return name in self._targets or name in self._loaded

    def check(self, name: str) -> None:
        if name not in self:
            raise UserError(unknown_name(self.kind, name, self.names()))

    def target(self, name: str) -> str:
        """"module.path:attribute" of an entry ("" where there is none)."""
        self.check(name)
        return self._targets.get(name, "")

    def params(self, name: str) -> Optional[Dict[str, Any]]:
        """The keyword arguments a user may set for `name`, each with its default; None when it takes **kwargs."""
        self.check(name)
        if name not in self._params:
            self._params[name] = self._read_params(name)
        found = self._params[name]
        return None if found is None else dict(found)

    def names_in(self, name: str) -> Dict[str, str]:
        """Which parameter of `name` holds names of which other registry (by display name): {} by default."""
        self.check(name)
        module, attr = _split(self._targets.get(name, ""))
        if not module:
            return {}
        declared = _module_literal(module, "PARAM_NAMES") or {}
        return dict(declared.get(attr, {}))

    def _read_params(self, name: str) -> Optional[Dict[str, Any]]:
        module, attr = _split(self._targets.get(name, ""))
        if not module:
            if name in self._loaded:  # registered as an object (register()): it is imported already
                return _from_signature(self._loaded[name], self.fixed)
            return {}
        return _signature_params(module, attr, self.fixed)

    # ---- the entry itself: imports its module ----
    def get(self, name: str) -> Callable:
        self.check(name)
        if name not in self._loaded:
            module, attr = _split(self._targets[name])
            if not module:
                raise ValueError(f"{self.kind} {name!r} is a name only; it has nothing to build")
            found = importlib.import_module(module)
            for part in attr.split("."):
                found = getattr(found, part)
            self._loaded[name] = found
        return self._loaded[name]

    def build(self, name: str, **kwargs):
        return self.get(name)(**kwargs)

    def register(self, name: Optional[str] = None) -> Callable:
        """Add an already-imported callable (decorator), for registries whose entries cost nothing to import."""

        def add(fn: Callable) -> Callable:
            key = name or fn.__name__
            if key in self:
                raise ValueError(f"{self.kind} {key!r} is registered twice")
            self._loaded[key] = fn
            return fn

        return add


class TaskRegistry(Registry):
    """Tasks read `run.task_params`, not keyword arguments: each task module (one task per module) declares them as
    a module-level literal `PARAMS = {"key": default}` (REQUIRED / NOT_LITERAL as bare names where that is the
    default) and the names they hold as `PARAM_NAMES = {"key": "<registry>"}`. A module without PARAMS: None."""

    def _read_params(self, name: str) -> Optional[Dict[str, Any]]:
        module, _ = _split(self._targets.get(name, ""))
        return _module_literal(module, "PARAMS") if module else None

    def names_in(self, name: str) -> Dict[str, str]:
        self.check(name)
        module, _ = _split(self._targets.get(name, ""))
        return dict(_module_literal(module, "PARAM_NAMES") or {}) if module else {}


def unknown_name(kind: str, name: str, known: List[str]) -> str:
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; choose one of: {', '.join(known)}"


# ---- reading source without running it ----
def _split(target: str) -> Tuple[str, str]:
    module, _, attr = target.partition(":")
    return module, attr


_TREES: Dict[str, ast.Module] = {}


def _module_tree(module: str) -> ast.Module:
    """The module's parsed source, found without executing it (only its parent packages are imported)."""
    if module not in _TREES:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise ValueError(f"cannot find the source of module {module!r}")
        with open(spec.origin, encoding="utf-8") as f:
            _TREES[module] = ast.parse(f.read(), filename=spec.origin)
    return _TREES[module]


def _top_level(tree: ast.Module) -> Dict[str, ast.AST]:
    found: Dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    found[t.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
    return found


def _value(node: ast.AST, names: Dict[str, ast.AST]) -> Any:
    """A default's value: a literal, a module-level constant holding one, REQUIRED / NOT_LITERAL by name."""
    if isinstance(node, ast.Name):
        if node.id in ("REQUIRED", "NOT_LITERAL"):
            return REQUIRED if node.id == "REQUIRED" else NOT_LITERAL
        if node.id in names and not isinstance(names[node.id], (ast.FunctionDef, ast.ClassDef, ast.Name)):
            return _value(names[node.id], names)
        return NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def _module_literal(module: str, variable: str) -> Any:
    """A module-level `VARIABLE = {...}` dict, values read as literals (None when the module has none)."""
    node = _top_level(_module_tree(module)).get(variable)
    if node is None:
        return None
    if not isinstance(node, ast.Dict):
        raise ValueError(f"{module}.{variable} must be a dict literal")
    names = _top_level(_module_tree(module))
    return {ast.literal_eval(k): _value(v, names) for k, v in zip(node.keys, node.values)}


def _signature_params(module: str, attr: str, fixed: Sequence[str]) -> Optional[Dict[str, Any]]:
    tree = _module_tree(module)
    names = _top_level(tree)
    node = names.get(attr)
    skip_self = False
    seen = set()
    while isinstance(node, ast.ClassDef):  # its __init__, or the first same-module base class's
        seen.add(node.name)
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is not None:
            node, skip_self = init, True
            break
        bases = [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in names and b.id not in seen]
        if not bases:
            raise ValueError(f"{module}:{attr} has no __init__ that can be read without importing it")
        node = names[bases[0]]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ValueError(f"{module}:{attr} is not a function or class defined in that module")
    a = node.args
    if a.kwarg is not None:
        return None
    positional = list(a.posonlyargs) + list(a.args)
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    pairs = list(zip(positional, defaults))[1 if skip_self else 0 :] + list(zip(a.kwonlyargs, a.kw_defaults))
    return {arg.arg: REQUIRED if default is None else _value(default, names)
            for arg, default in pairs if arg.arg not in fixed}


def _from_signature(fn: Callable, fixed: Sequence[str]) -> Optional[Dict[str, Any]]:
    """The same, for an object already imported (inspect.signature); the drift test checks both agree."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name: REQUIRED if p.default is p.empty else p.default for p in params
            if p.kind not in (p.VAR_POSITIONAL,) and p.name not in fixed}
