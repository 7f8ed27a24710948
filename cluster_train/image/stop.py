"""The "save and stop" request: SIGUSR1 (the job's warning before its time limit) or SIGTERM (Slurm's preemption or
time limit) only set a flag here; the ranks act on it at the next
step boundary (cluster_train/image/guard.py). Imports no torch.
"""
import signal
import threading

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_received = []  # signal names, in order of arrival


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


def reset() -> None:
    _received.clear()
