"""Started by every Python process of your own command (cluster_train/image/command.py puts this directory first on
PYTHONPATH): SIGUSR1, the job's time-limit warning, gets a Python handler that ends the process exactly as the default
action would (killed by SIGUSR1, status 138), unless the script installs its own.

Why: Lightning installs its SLURM auto-requeue on SIGUSR1 only when it finds no handler there
(pytorch_lightning/trainer/connectors/signal_connector.py, _has_already_handler), and that auto-requeue calls
`scontrol`, which the container lacks (Lightning#21404): it saves hpc_ckpt inside the signal handler and trains on.
The batch shell owns requeue. Ignoring SIGUSR1 (SIG_IGN, inherited across exec) would stop Lightning too, but would
also keep every other script alive past the warning; a handler that dies as the default does changes nothing else.
Then the site's own sitecustomize (Debian's, a user's on PYTHONPATH) runs as it would have.
"""
import importlib.machinery
import importlib.util
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _die_as_default(signum, frame):
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _next_sitecustomize() -> None:
    """The sitecustomize this one stands before on sys.path, run as Python would have run it."""
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != HERE]
    sys.path[:] = rest  # this directory served its purpose: your code sees the path it would have seen
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:  # an inherited SIG_IGN stays as it was
    signal.signal(signal.SIGUSR1, _die_as_default)
_next_sitecustomize()
