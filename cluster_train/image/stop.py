"""The "save and stop" request. It reaches the trainer two ways, and only sets a flag here; the ranks act on it at the
next step boundary (cluster_train/image/guard.py):
- a signal: SIGUSR1 (the job's warning before its time limit) or SIGTERM (Slurm's preemption, a cancel);
- the stop file the batch shell writes at the warning ($CT_STOP_FILE, its first word the signal's name): a node's
  ranks that share one container (apptainer --sharens) cannot be signalled, since Apptainer does not forward signals
  to a process that joined a shared container (its starter dies of them instead).
Imports no torch.
"""
import os
import signal
import threading
import time

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
STOP_FILE = "CT_STOP_FILE"  # the variable that names this segment's stop file (templates/_segments.sh.j2)
LOOK_EVERY_S = 1.0  # a stat a second, not one per step: on a parallel file system a step can take milliseconds
_received = []  # signal names, in order of arrival
_looked = [float("-inf")]


def _handler(signum, frame):
    _received.append(signal.Signals(signum).name)


def install() -> None:
    """Make SIGUSR1 and SIGTERM request a stop instead of killing the process (main thread only, idempotent)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _handler)


def installed() -> bool:
    return all(signal.getsignal(sig) is _handler for sig in SIGNALS)


def requested() -> str:
    """The first signal that asked for a stop ('SIGUSR1', 'SIGTERM'), or '' when none did."""
    return _received[0] if _received else ""


def poll() -> str:
    """requested(), after a look at the stop file (at most one a second). Every rank looks, and the ranks agree at the
    step (guard.py), so the one that sees the file first stops them all at the same step."""
    path, now = os.environ.get(STOP_FILE), time.monotonic()
    if path and not _received and now - _looked[0] >= LOOK_EVERY_S:
        _looked[0] = now
        try:
            with open(path) as f:
                words = f.read().split()
        except OSError:  # not there: no stop asked
            words = []
        if words:
            _received.append(words[0] if words[0] in {sig.name for sig in SIGNALS} else SIGNALS[0].name)
    return requested()


def reset() -> None:
    _received.clear()
    _looked[0] = float("-inf")
