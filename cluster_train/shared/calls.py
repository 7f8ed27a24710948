"""A Python function call sent into the image (cluster_train/host/api/function.py) and what comes back, as files of the
run directory: call/args.pkl holds the Call to make (the function by module and qualified name, as pickle refers to it,
unless the caller asked for cloudpickle), call/result.pkl what it returned or raised. Both sides import this; it imports
nothing heavy."""
import pickle
from pathlib import Path
from typing import Any, Callable, Dict, Optional

ARGS = Path("call") / "args.pkl"
RESULT = Path("call") / "result.pkl"
COMMAND = ["python", "-m", __name__.split(".")[0], "call"]  # in the snapshot, which is first on sys.path


class Call:
    """fn(*args, **kwargs), to be made in the image. A checkpoint hook (`fn.checkpoint(*args, **kwargs)`, called on
    the time-limit warning) returns the Call the requeued job makes next, or None to make the same one again."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


def write(path: Path, payload: Any, dumps: Callable[[Any], bytes] = pickle.dumps) -> None:
    """Whole or not at all: a job killed mid-write leaves the previous file (a requeue reads it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(dumps(payload))
    tmp.replace(path)


def outcome(value: Any = None, error: Optional[BaseException] = None, traceback_text: str = "") -> Dict[str, Any]:
    """What result.pkl holds: the value, or the exception (when it pickles) with its type, message and traceback."""
    if error is None:
        return {"value": value}
    try:
        pickled: Optional[bytes] = pickle.dumps(error)
    except Exception:  # an exception holding a lock or a socket: its text still comes back
        pickled = None
    kind = type(error).__qualname__ if type(error).__module__ == "builtins" else \
        f"{type(error).__module__}.{type(error).__qualname__}"
    return {"error": pickled, "type": kind,
            "message": str(error), "traceback": traceback_text}
