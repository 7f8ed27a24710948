"""A study's directory: study.json (what was asked: cluster, profile, experiment, overrides, the search, the storage,
each batch of trials and its job array), study.db (Optuna's SQLite storage, unless the settings name PostgreSQL),
trials.json (each trial as the driver last saw it, for `status`, `runs` and reports without Optuna), driver.lock and
driver.log, and one directory per batch of trials, batch-N/, a sweep directory (sweep.json, e0, e1, ...)."""
import fcntl
import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from cluster_train.shared.durable import atomic_write_bytes
from cluster_train.shared.errors import UserError
from cluster_train.host.search.spec import read_spec

STUDY = "study.json"
TRIALS = "trials.json"
LOCK = "driver.lock"
CANCELLED = "cancelled"  # written by `cancel`: the driver stops at its next look; `resume` removes it
FINISHED = ("COMPLETE", "PRUNED", "FAIL")  # Optuna's finished states: each counts towards the study's trials


def is_study(path: Path) -> bool:
    return (Path(path) / STUDY).is_file()


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        if default is not None:
            return default
        raise UserError(f"{path} is missing; this is not a study directory") from None
    except ValueError:
        raise UserError(f"{path} is not valid JSON; it is damaged, restore it") from None


RECORDED = ("study_id", "spec", "storage")  # what `status`, `cancel` and the report read from study.json
DRIVEN = ("cluster_file", "profile", "experiment", "overrides", "max_parallel", "scheduler", "task", "max_epochs",
          "batches")  # and what the driver reads besides


def read_record(study_dir: Path, keys: Tuple[str, ...] = RECORDED) -> Dict[str, Any]:
    """study.json, its `keys` and its search checked: a damaged record is one line here, not a KeyError deep in
    `status`, or in the driver after it has taken the study's lock (or `cancel` has marked it cancelled)."""
    path = Path(study_dir) / STUDY
    record = read_json(path)
    if not isinstance(record, dict):
        raise UserError(f"{path} holds a JSON {type(record).__name__}, not a study's record (an object); it is "
                        f"damaged, restore it")
    missing = [key for key in keys if key not in record]
    if missing:
        raise UserError(f"{path} lacks {', '.join(missing)}; it is damaged or not a run-cluster study, restore it")
    read_spec(record["spec"], f"{path}: spec")
    return record


def write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=2) + "\n").encode())


def read_trials(study_dir: Path) -> List[Dict[str, Any]]:
    return read_json(Path(study_dir) / TRIALS, [])


def shown_params(params: Dict[str, Any]) -> str:
    """A trial's values as --set takes them: `optim.lr=0.01 optim.weight_decay=1e-05`."""
    return " ".join(f"{k}={v}" for k, v in params.items())


def best(trials: List[Dict[str, Any]], direction: str) -> Optional[Dict[str, Any]]:
    complete = [t for t in trials if t["state"] == "COMPLETE" and t.get("value") is not None]
    pick = max if direction == "maximize" else min
    return pick(complete, key=lambda t: t["value"]) if complete else None


def progress(study_dir: Path) -> Dict[str, Any]:
    """What `status` and `runs` say of a study: how many trials finished of how many, pruned, failed, running, the
    best, and whether a driver is at work."""
    record, trials = read_record(study_dir), read_trials(study_dir)
    count = {state: sum(t["state"] == state for t in trials) for state in (*FINISHED, "RUNNING")}
    return {"trials": record["spec"]["trials"], "finished": sum(count[s] for s in FINISHED), "pruned": count["PRUNED"],
            "failed": count["FAIL"], "running": count["RUNNING"], "best": best(trials, direction(record)),
            "driver": driver_holder(study_dir), "metric": record["spec"]["objective"]["metric"]}


def direction(record: Dict[str, Any]) -> str:
    return record["spec"]["objective"]["direction"]


@contextmanager
def driver_lock(study_dir: Path) -> Iterator[None]:
    """One driver per study at a time (flock: released when its process dies, however it dies)."""
    path = Path(study_dir) / LOCK
    with path.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"a driver of study {Path(study_dir).name} is at work ({driver_holder(study_dir)}); "
                            f"stop it first, or let it finish") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        lock.flush()
        yield


def driver_holder(study_dir: Path) -> str:
    """"pid N on HOST" while a driver holds the study's lock, else ""."""
    path = Path(study_dir) / LOCK
    if not path.exists():
        return ""
    with path.open("r") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return lock.read().strip() or "running"
        return ""
