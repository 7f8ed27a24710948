"""`python -m train call`: the function call a run was sent (cluster_train/shared/calls.py), made in the image from the
run's code snapshot. It runs as the run's command (cluster_train/image/command.py: the ranks' variables, the snapshot as
working directory), so every rank makes the call; rank 0's return value or exception is written to call/result.pkl.

On the time-limit warning (SIGUSR1, which the batch shell forwards) or Slurm's preemption (SIGTERM), a function
object with a `checkpoint` method is asked for the call to make next (like submitit's Checkpointable): rank 0 writes
it to call/args.pkl and every rank exits 75, so that the batch shell requeues the job and the next segment makes it.
A plain function ignores the warning (nothing to save): it runs on, to its end or the time limit. Imports no torch."""
import os
import pickle
import signal
import traceback
from pathlib import Path

from cluster_train.image import stop
from cluster_train.image.leave import leave
from cluster_train.shared import calls
from cluster_train.shared.exit_codes import REQUEUE


def run_call(run_dir: Path) -> int:
    """Make the run's call; 0 when it returned, 1 when it raised (or could not be loaded). Rank 0 writes the result."""
    try:
        call = pickle.loads((run_dir / calls.ARGS).read_bytes())
        if callable(getattr(call.fn, "checkpoint", None)):
            on_warning(call, run_dir)
        else:  # nothing to save: run on to the end (or the time limit) rather than die on the warning
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        result, status = calls.outcome(value=call()), 0
    except Exception as err:  # the function's own failure: raised again on the caller's side, with this traceback
        result, status = calls.outcome(error=err, traceback_text=traceback.format_exc()), 1
    if is_rank_zero():
        calls.write(run_dir / calls.RESULT, result)
    return status


def on_warning(call: calls.Call, run_dir: Path) -> None:
    """SIGUSR1/SIGTERM: the function's checkpoint hook names the next call, saved for the requeued job."""

    def save_and_requeue(signum, frame):
        following = call.fn.checkpoint(*call.args, **call.kwargs) if is_rank_zero() else None
        if is_rank_zero():
            calls.write(run_dir / calls.ARGS, following or call)
            print(f"[cluster-train] {signal.Signals(signum).name}: the function's checkpoint saved its next call; "
                  f"exiting {REQUEUE} to be requeued", flush=True)
        leave(REQUEUE)

    for sig in stop.SIGNALS:
        signal.signal(sig, save_and_requeue)


def is_rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"
