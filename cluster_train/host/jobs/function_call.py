"""A Python function sent into the image (cluster_train/host/api/function.py): refused before anything is queued, in one
line, where the image could not import it, then pickled as the run's call (cluster_train/shared/calls.py).

By reference (the default), pickle names the function by module and qualified name and the image imports it from the
run's code snapshot: the working directory's project. So the function must live at the top level of a module under
that directory, importable by its dotted name from there. cloudpickle (by_value) carries the function itself instead,
for a lambda, a notebook cell or a script's own function; the images hold it (containers/*.lock)."""
import pickle
import re
import sys
import types
from pathlib import Path
from typing import Any, Callable, List, Optional

from cluster_train.shared import calls
from cluster_train.shared.calls import Call
from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.images.store import base_flavor

BY_VALUE = "by_value=True (cloudpickle carries the function itself)"
PACKAGE = calls.__name__.split(".")[0]  # the image's own package, which `python -m PACKAGE call` must find first


def defined_by(fn: Callable[..., Any]) -> Any:
    """What pickle looks up by name: the function, or a callable object's class."""
    plain = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)
    return fn if isinstance(fn, plain) else type(fn)


def name_of(fn: Callable[..., Any]) -> str:
    target = defined_by(fn)
    return f"{target.__module__}.{target.__qualname__}"


def module_path(fn: Callable[..., Any], root: Path) -> str:
    """The file of fn's module, relative to the snapshot root, that the image imports fn from; refused in one line
    where the image could not import it by name."""
    if not callable(fn):
        raise UserError(f"{fn!r} is not callable; pass a function (or an object with __call__) to submit")
    target = defined_by(fn)
    name, module = target.__qualname__, target.__module__
    if "<lambda>" in name:
        raise UserError(f"a lambda ({module}.{name}) cannot be imported in the image; define it with def at the top "
                        f"level of a module under {root}, or pass {BY_VALUE}")
    if "<locals>" in name:
        raise UserError(f"{module}.{name} is defined inside another function, so the image cannot import it; move "
                        f"it to the top level of its module, or pass {BY_VALUE}")
    if module == "__main__":
        raise UserError(f"{name} is defined in __main__ (a script run directly, or a notebook cell), which the image "
                        f"cannot import; move it into a module under {root} and import it, or pass {BY_VALUE}")
    return module_file(module, root)


def module_file(module: str, root: Path) -> str:
    if module.split(".")[0] == PACKAGE:
        raise UserError(f"module {module} is named like the image's own {PACKAGE} package; rename your package")
    found = getattr(sys.modules.get(module), "__file__", None)
    path = Path(found).resolve() if found else None
    dotted = Path(*module.split("."))
    wanted = [root / dotted.with_suffix(".py"), root / dotted / "__init__.py"]
    if path not in wanted:
        raise UserError(f"module {module} ({found or 'no file'}) is not {wanted[0].relative_to(root)} under the code "
                        f"snapshot's root {root}, so the image cannot import it; submit from the directory that "
                        f"holds its package, or pass {BY_VALUE}")
    return str(path.relative_to(root))


def pickled(call: Call, by_value: bool) -> bytes:
    """The call as call/args.pkl holds it; an argument that does not pickle is refused, named."""
    dumps = cloudpickle_dumps(call.fn) if by_value else pickle.dumps
    try:
        return dumps(call)
    except Exception as err:
        for where, value in [("the function", call.fn), *arguments(call)]:
            try:
                dumps(value)
            except Exception as own:
                raise UserError(f"{where} of {name_of(call.fn)} cannot be pickled ({first_line(own)}); pass plain "
                                f"data or paths, or make it inside the function") from None
        raise UserError(f"the call of {name_of(call.fn)} cannot be pickled ({first_line(err)})") from None


def arguments(call: Call) -> List[tuple]:
    return [(f"argument {i + 1} ({type(a).__name__})", a) for i, a in enumerate(call.args)] + \
        [(f"argument {k}= ({type(v).__name__})", v) for k, v in call.kwargs.items()]


def cloudpickle_dumps(fn: Callable[..., Any]) -> Callable[[Any], bytes]:
    """cloudpickle.dumps carrying fn's own module by value too (the image may not have it)."""
    try:
        import cloudpickle
    except ImportError:
        raise UserError(f"by_value=True needs cloudpickle where you submit from; pip install cloudpickle (the "
                        f"images hold it), or drop by_value to send the function by name") from None
    module: Optional[types.ModuleType] = sys.modules.get(defined_by(fn).__module__)

    def dumps(value: Any) -> bytes:
        by_value = module is not None and module.__name__ != "__main__"  # __main__ goes by value already
        if by_value:
            cloudpickle.register_pickle_by_value(module)
        try:
            return cloudpickle.dumps(value)
        finally:
            if by_value:
                cloudpickle.unregister_pickle_by_value(module)

    return dumps


def first_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text.splitlines()[0] if text.strip() else type(err).__name__


def same_python(flavor: str) -> None:
    """by_value sends bytecode, which only the Python version that wrote it runs (another one crashes on it): the
    image's version is the label its definition file gives it."""
    definition = project.ROOT / "containers" / f"{base_flavor(flavor)}.def"
    label = re.search(r"org\.cluster-train\.python\s+(\S+)", definition.read_text()) if definition.is_file() else None
    here = "%d.%d" % sys.version_info[:2]
    if label and label.group(1) != here:
        raise UserError(f"by_value=True sends Python {here} bytecode and the {flavor} image runs Python "
                        f"{label.group(1)}, which cannot run it; send the function by name (drop by_value), or "
                        f"submit from Python {label.group(1)}")


# What a returned value may need to unpickle that a login node lacks: named in the refusal's fix
HEAVY = ("torch", "numpy", "lightning", "pytorch_lightning", "pandas", "jax", "tensorflow")
PLAIN_FIX = ("return plain Python values instead (a tensor or an array as value.tolist(), a number as float(value), "
             "a model's weights saved to a file in the run directory and its path returned)")


def globals_of(data: bytes) -> List[str]:
    """The "module.name" of every class or function a pickle names, read with pickletools (nothing is imported or
    run): GLOBAL's argument, or STACK_GLOBAL's two strings pushed before it (directly or from the memo)."""
    import pickletools

    found, pushed, memo = [], [], {}
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            found.append(arg.replace(" ", ".", 1))
        elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
            pushed.append(arg)
        elif op.name == "MEMOIZE" and pushed:
            memo[len(memo)] = pushed[-1]
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT") and pushed:
            memo[arg] = pushed[-1]
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            pushed.append(memo.get(arg, ""))
        elif op.name == "STACK_GLOBAL" and len(pushed) >= 2:
            found.append(f"{pushed[-2]}.{pushed[-1]}")
        if op.name == "MEMOIZE" and not pushed:
            memo[len(memo)] = ""
    return list(dict.fromkeys(found))


def missing_here(data: bytes) -> List[str]:
    """The globals of a pickle whose top-level package is not installed here (torch on a torch-free login node)."""
    from _compat_pickle import IMPORT_MAPPING  # protocols 0-2 name Python 2's modules (copy_reg, __builtin__)

    tops = {name: IMPORT_MAPPING.get(name.split(".")[0], name.split(".")[0]) for name in globals_of(data)}
    return [name for name, top in tops.items() if not installed(top.split(".")[0])]


def installed(package: str) -> bool:
    """Whether `package` imports here, asked without importing it (torch takes seconds)."""
    from importlib.util import find_spec

    try:
        return package in sys.modules or find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def torch_free_return(fn: Callable[..., Any]) -> None:
    """A function whose return annotation names a type of a package not installed here (torch.Tensor where you
    submit from has no torch) is refused before it is queued: its value could not be read back. An annotation
    names one in its text (a string annotation: `-> "torch.Tensor"`) or by the type's module."""
    import inspect

    try:
        annotation = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):  # a builtin or an object without a signature: nothing to read
        return
    if annotation is inspect.Signature.empty:
        return
    shown = annotation if isinstance(annotation, str) else getattr(annotation, "__qualname__", repr(annotation))
    text = annotation if isinstance(annotation, str) else f"{getattr(annotation, '__module__', '')} {annotation!r}"
    for alias, package in (*((p, p) for p in HEAVY), ("np", "numpy"), ("pl", "lightning")):
        if re.search(rf"\b{alias}\.", f"{text}.") and not installed(package):
            raise UserError(f"{name_of(fn)} returns {shown}, which needs {package} to unpickle here, where {package} "
                            f"is not installed; {PLAIN_FIX}")
