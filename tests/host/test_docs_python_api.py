"""The Python API's guide (docs/how-to/python-api.md): its code blocks compile, and every name they take from the API
is a real one (a name of the package, or an attribute of one of its public classes), so a renamed or dropped API name
fails here."""
import re
from dataclasses import fields, is_dataclass

import cluster_train as ct
from conftest import ROOT

from cluster_train.host.api.job import Job
from cluster_train.host.api.sweep import Sweep
from cluster_train.host.api.values import DryRun

PAGE = ROOT / "docs" / "how-to" / "python-api.md"
PUBLIC = (Job, Sweep, DryRun, ct.Run, ct.RunStatus, ct.Pipeline, ct.Executor, ct.FunctionRun, ct.FunctionError,
          ct.Study)


def attributes(cls: type) -> list:
    """A class's attributes, a dataclass's fields (which need no class attribute) among them."""
    return [*dir(cls), *(f.name for f in fields(cls))] if is_dataclass(cls) else dir(cls)


def api_page() -> str:
    return PAGE.read_text()


def code_blocks() -> list:
    return re.findall(r"^```python\n(.*?)^```$", api_page(), re.M | re.S)


def test_the_guides_api_code_compiles_and_names_only_real_api_names():
    blocks = code_blocks()
    assert len(blocks) >= 3 and blocks[0].startswith("import cluster_train as ct\n"), blocks[:1]
    for block in blocks:
        compile(block, str(PAGE), "exec")
    code = re.sub(r'"[^"\n]*"', '""', "\n".join(blocks))  # dotted config keys in strings are no API names
    unknown_names = {name for name in re.findall(r"\bct\.(\w+)", code) if not hasattr(ct, name)}
    members = {name for cls in PUBLIC for name in attributes(cls)}
    members |= {"value"}  # a State's .value
    unknown_attributes = {name for name in re.findall(r"[\w)\]]\.(\w+)", code) if name not in members | set(dir(ct))}
    assert not unknown_names and not unknown_attributes, (unknown_names, unknown_attributes)


def test_the_guide_names_the_examples_a_test_runs():
    for example in ("seed_sweep.py", "seed001_pipeline.py", "function_call.py"):
        assert f"`examples/api/{example}`" in api_page() and (ROOT / "examples" / "api" / example).is_file()


def documented_callables() -> list:
    """(label, function, its docstring) of every public function of the API and every public method of its public
    classes (a class's __init__ with the class docstring): what docs/reference/api.md shows through autodoc."""
    import inspect
    from enum import Enum

    from cluster_train.host import api

    found = []
    for name in api.__all__:
        obj = getattr(api, name)
        if inspect.isfunction(obj):
            found.append((name, obj, obj.__doc__ or ""))
        if not inspect.isclass(obj) or issubclass(obj, (Enum, BaseException)):
            continue  # an enum's and an exception's constructors are Python's own
        if "__init__" in vars(obj):  # an inherited one is described where it is defined
            found.append((f"{name}()", obj.__init__, f"{obj.__doc__ or ''}\n{obj.__init__.__doc__ or ''}"))
        for attr, member in vars(obj).items():
            fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if not attr.startswith("_") and inspect.isfunction(fn):
                found.append((f"{name}.{attr}", fn, fn.__doc__ or ""))
    return found


def test_every_public_parameter_is_described_in_the_api_reference():
    """Each parameter of a public function or method is named in its docstring (a class's: in the class's), which
    the API reference page renders: a new parameter without a word on it fails here."""
    import inspect

    undescribed = {}
    for label, fn, doc in documented_callables():
        for param in inspect.signature(fn).parameters.values():
            if param.name in ("self", "cls") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if not re.search(rf"\b{re.escape(param.name)}\b", doc):
                undescribed.setdefault(label, []).append(param.name)
    assert not undescribed, undescribed


def test_the_api_reference_page_shows_every_public_name():
    from cluster_train.host import api

    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    shown = set(re.findall(r"\.\. auto(?:class|function):: cluster_train\.(\w+)", page))
    assert set(api.__all__) <= shown, sorted(set(api.__all__) - shown)
