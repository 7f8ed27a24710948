"""Follow a job's log while it runs, and wait for it to end (by the scheduler's word or the run's own record)."""
import threading
import time
from pathlib import Path
from typing import Dict

from train.errors import UserError
from train.host.schedulers import FINISHED
from train.host.segments import run_state


def wait(scheduler, job_id: str, run_dir: Path, timeout_s: float, poll_s: float = 1.0) -> Dict:
    """Poll until the job ends (sbatch --wait polls only every ~10 s)."""
    deadline = time.time() + timeout_s
    while True:
        state = run_state(scheduler, job_id, run_dir)
        if state["state"] in FINISHED:
            return state
        if time.time() > deadline:
            raise UserError(f"job {job_id} did not finish within {timeout_s:.0f} s (state {state['state'].value})")
        time.sleep(poll_s)


def follow(scheduler, job_id: str, run_dir: Path, timeout_s: float) -> int:
    """Wait for the job, echoing its log as it grows; the exit status is the job's."""
    done = threading.Event()
    printer = threading.Thread(target=_tail, args=(run_dir / "logs", done), daemon=True)
    printer.start()
    state = wait(scheduler, job_id, run_dir, timeout_s)
    time.sleep(0.5)
    done.set()
    printer.join()
    print(f"job {job_id} {state['state'].value}; results in {run_dir}")
    return 0 if state["state"] == "COMPLETED" else 1


def follow_log(scheduler, job_id: str, run_dir: Path, forever: bool) -> None:
    if not forever:
        for path in _logs(run_dir / "logs"):
            print(path.read_text(), end="")
        return
    done = threading.Event()
    printer = threading.Thread(target=_tail, args=(run_dir / "logs", done), daemon=True)
    printer.start()
    while run_state(scheduler, job_id, run_dir)["state"] not in FINISHED:
        time.sleep(1)
    time.sleep(0.5)
    done.set()
    printer.join()


def _logs(logs: Path):
    """The scheduler's logs: standard output (*.out) and, where it keeps one apart (LSF -e), standard error."""
    return sorted(p for p in logs.iterdir() if p.is_file() and p.suffix in (".out", ".err")) if logs.is_dir() else []


def _tail(logs: Path, done: threading.Event) -> None:
    position, path = 0, None
    while True:
        finished = done.is_set()
        if path is None:
            found = _logs(logs)
            path = found[0] if found else None
        if path is not None:
            with path.open() as f:
                f.seek(position)
                chunk = f.read()
                position = f.tell()
            if chunk:
                print(chunk, end="", flush=True)
        if finished:
            return
        time.sleep(0.5)
