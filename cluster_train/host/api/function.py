"""A Python function run inside the pinned image, as submitit's `executor.submit(fn, *args)` runs it on a cluster:

    from cluster_train.host.api.function import Executor
    run = Executor("ci-slurm", "n1_gpu1").submit(train_one, seed=3)
    value = run.result(timeout=600)  # its return value, or FunctionError with the remote traceback

The function is imported in the image from the run's code snapshot (the working directory's project), by module and
qualified name; `by_value=True` sends it with cloudpickle instead (a lambda, a notebook cell), which needs the
image's Python version where you submit (bytecode of another version crashes it: refused). Its arguments and
result travel as call/args.pkl and call/result.pkl in the run directory. On a profile of several ranks every rank
calls it and rank 0's return value (or exception) is kept. A callable object with a `checkpoint(*args, **kwargs)`
method is asked, on the job's time-limit warning, for the Call to make once the job is requeued (None: the same call
again), as submitit's Checkpointable is.
"""
import pickle
import re
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional

from cluster_train.shared import calls
from cluster_train.shared.calls import Call
from cluster_train.shared.errors import UserError
from cluster_train.host.api.job import after_dirs
from cluster_train.host.api.overrides import Overrides, given_overrides
from cluster_train.host.api.run import Run
from cluster_train.host.api.values import After, checked_number
from cluster_train.host import project
from cluster_train.host.jobs import code_snapshot, function_call
from cluster_train.host.jobs.build import Request, Site, Submission
from cluster_train.host.jobs.overrides import typed_overrides
from cluster_train.host.runs.after import build_after
from cluster_train.host.runs.queue import queue
from cluster_train.host.runs.sweep import prepare_listed, queue_sweep
from cluster_train.host.scheduling.job import new_run_id

__all__ = ["Executor", "FunctionRun", "FunctionError", "Call"]


class FunctionError(RuntimeError):
    """The function raised in the image (or its run ended without a result). The message holds the remote
    traceback, also in `.remote_traceback`; the remote exception, where it unpickles here, is its __cause__."""

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.remote_traceback = remote_traceback


class FunctionRun(Run):
    """A run that makes one function call (a future of it, as submitit's Job and concurrent.futures' Future are);
    `warnings`: what the submission warned about (the CLI prints these)."""

    warnings: List[str] = []

    def result(self, timeout: Optional[float] = None) -> Any:
        """Wait for the run (at most `timeout` seconds: TimeoutError), then its function's return value; raises
        FunctionError with the remote traceback where it raised, and ClusterTrainError (naming the type and the fix)
        where the value needs a package not installed here to unpickle (torch on a login node)."""
        checked_number("timeout", timeout, none_ok=True)
        status = self.wait(timeout)
        return result_of(self.path, f"{status.shown}{f' ({status.cause})' if status.cause else ''}")

    def done(self) -> bool:
        """Whether the run has ended (its function returned or raised, or the job ended otherwise); no waiting."""
        return self.status().ended

    def exception(self, timeout: Optional[float] = None) -> Optional[FunctionError]:
        """Wait as result() does (at most `timeout` seconds: TimeoutError), then the FunctionError it would raise
        (the remote exception its __cause__), or None where the function returned."""
        try:
            self.result(timeout)
        except FunctionError as err:
            return err
        return None


def result_of(run_dir: Path, ended: str) -> Any:
    """The value call/result.pkl of an ended run holds, or FunctionError with the remote traceback; `ended`: how the
    run ended, for a run that wrote no result. A value whose classes are not importable here is refused before it is
    unpickled, with the fix (pickletools reads the names: nothing runs)."""
    path = run_dir / calls.RESULT
    if not path.is_file():
        raise FunctionError(f"run {run_dir.name} ended {ended} without a result ({path} was not written); its log: "
                            f"{run_dir / 'logs'}")
    data = path.read_bytes()
    missing = function_call.missing_here(data)
    if missing:
        package = missing[0].split(".")[0]
        raise UserError(f"the function of run {run_dir.name} returned a value of {', '.join(missing[:3])}, which needs "
                        f"{package} to unpickle here, where {package} is not installed; {function_call.PLAIN_FIX}")
    outcome = pickle.loads(data)
    if "error" not in outcome:
        return outcome["value"]
    raise FunctionError(f"the function of run {run_dir.name} raised {outcome['type']}: {outcome['message']}\n"
                        f"remote traceback:\n{outcome['traceback']}", outcome["traceback"]) from remote(outcome)


def remote(outcome: dict) -> Optional[BaseException]:
    """The remote exception itself, where its class is importable here too."""
    try:
        return pickle.loads(outcome["error"]) if outcome["error"] else None
    except Exception:
        return None


class Executor:
    """Where functions run: `cluster` (a name in clusters/ or a cluster file) and one of its profiles, `profile`;
    `overrides`: run config overrides ({"key": value} or ["key=value"]); `by_value`: send the function with
    cloudpickle instead of by name (a lambda, a notebook cell); `after`: runs (Run, id or directory) each call starts
    after, as Job.submit(after=...) takes them."""

    def __init__(self, cluster: str, profile: str, *, overrides: Overrides = (), by_value: bool = False,
                 after: After = ()) -> None:
        self.cluster, self.profile, self.by_value = cluster, profile, by_value
        self.overrides = given_overrides(overrides)
        self.after = after_dirs(after)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FunctionRun:
        """Check and queue fn(*args, **kwargs); raises UserError (one line, nothing queued) where the image could
        not import fn, an argument does not pickle, or fn's return annotation names a type (torch.Tensor) that
        could not be unpickled here."""
        call = Call(fn, *args, **kwargs)
        source, spec = self._checked_fn(fn), function_call.pickled(call, self.by_value)
        sub = build_after(self._site(), self._request(fn, self.after))
        try:
            self._image_checks(sub, source, fn)
            queue(sub, lambda run_dir: calls.write(run_dir / calls.ARGS, spec, dumps=bytes), call=self._call_record(fn))
        except BaseException:
            sub.discard()
            raise
        return function_run(sub)

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
            max_parallel: Optional[int] = None) -> List[FunctionRun]:
        """fn(*items) for each items of zip(*iterables), as the builtin map takes them, queued as ONE job array (one
        element per call, at most `max_parallel` at once: None, the scheduler's own cap); every call is checked
        before any is queued. Their FunctionRuns, in order."""
        checked_number("max_parallel", max_parallel, above=0, whole=True, none_ok=True)
        if self.after:
            raise UserError("Executor.map queues one job array, which waits for no run (after=); submit each call "
                            "with Executor(..., after=...).submit(fn, ...), or map once those runs have completed")
        made = [Call(fn, *items) for items in zip(*iterables)]
        if not made:
            raise UserError(f"Executor.map({function_call.name_of(fn)}, ...) got no items; pass at least one")
        source, specs = self._checked_fn(fn), [function_call.pickled(call, self.by_value) for call in made]
        site = self._site()
        sweep_id = new_run_id(Path(site.cluster.path).stem, self.profile)
        sweep = prepare_listed(site, self._request(fn, []), [{} for _ in made], max_parallel, sweep_id,
                               project.run_dir_for(sweep_id, site.runs_root), named="Executor.map")
        try:
            self._image_checks(sweep.elements[0], source, fn)
            queue_sweep(sweep, lambda i, run_dir: calls.write(run_dir / calls.ARGS, specs[i], dumps=bytes),
                        call=self._call_record(fn))
        except BaseException:
            for sub in sweep.elements:
                sub.discard()
            raise
        return [function_run(sub) for sub in sweep.elements]

    def _checked_fn(self, fn: Callable[..., Any]) -> Optional[str]:
        """fn refused before anything is built where the image could not import it or its value not come back; the
        module file the image imports it from (None: by value)."""
        source = None if self.by_value else function_call.module_path(fn, Path.cwd().resolve())
        function_call.torch_free_return(fn)
        return source

    def _site(self) -> Site:
        site = Site.load(self.cluster)
        if site.user.get("ssh"):
            raise UserError(f"a function is sent from {self.cluster}'s login node, not over ssh yet; submit it there")
        return site

    def _request(self, fn: Callable[..., Any], after: List[Path]) -> Request:
        name = re.sub(r"[^A-Za-z0-9_.+-]", "_", function_call.defined_by(fn).__qualname__)[:60]
        return Request(self.profile, None, overrides=typed_overrides({"name": name}, self.overrides),
                       command=list(calls.COMMAND),
                       after=after)

    def _image_checks(self, sub: Submission, source: Optional[str], fn: Callable[..., Any]) -> None:
        if source is not None:
            in_snapshot(sub, source, fn)
        if self.by_value:
            function_call.same_python(sub.job.image.flavor)
        no_shadow(sub)

    def _call_record(self, fn: Callable[..., Any]) -> dict:
        return {"function": function_call.name_of(fn), "by_value": self.by_value}


def function_run(sub: Submission) -> FunctionRun:
    run = FunctionRun(sub.job.work.run_dir)
    run.warnings = list(sub.warnings)
    return run


def in_snapshot(sub: Submission, source: str, fn: Callable[..., Any]) -> None:
    """The module file the image imports fn from is one the snapshot holds (not git-ignored, not left out)."""
    snapshot = sub.code.snapshot
    if not code_snapshot.holds(snapshot, source):
        raise UserError(f"{source} (the module of {function_call.name_of(fn)}) is not in the code snapshot of "
                        f"{snapshot.source} (git ignores it?); add it to the project, or pass by_value=True")


def no_shadow(sub: Submission) -> None:
    """`python -m PACKAGE call` runs in the snapshot, first on sys.path: a package of that name there would run."""
    package = function_call.PACKAGE
    for name in (f"{package}/__init__.py", f"{package}/__main__.py", f"{package}.py"):
        if code_snapshot.holds(sub.code.snapshot, name):
            raise UserError(f"{sub.code.snapshot.source}/{name} would run instead of the image's {package} package; "
                            f"rename your {package}")
