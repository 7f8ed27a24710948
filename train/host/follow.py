"""Follow a job's log while it runs (the scheduler adapters only say its state)."""
import threading
import time
from pathlib import Path

from train.host.schedulers import FINISHED, wait


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
    while scheduler.state(job_id, run_dir)["state"] not in FINISHED:
        time.sleep(1)
    time.sleep(0.5)
    done.set()
    printer.join()


def _logs(logs: Path):
    return sorted(p for p in logs.glob("*.out") if p.is_file())


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
