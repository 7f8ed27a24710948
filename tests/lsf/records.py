"""The state directory of the LSF stand-in of the tests (see standin.py) and the job records in it.

$CT_LSF_STATE (default /tmp/ct-lsf) holds one directory per job id: small files (stat, exit_code, pid, ...) written
whole by rename, and history.jsonl, every event with its time. bsub, the detached supervisor of each job and bjobs,
bkill, brequeue and bhist are separate processes that share a job only through these records, as LSF's daemons and
commands share it through theirs.
"""
import json
import os
import re
import time
from pathlib import Path

from bsub_options import refuse

STATE = Path(os.environ.get("CT_LSF_STATE", "/tmp/ct-lsf")).absolute()


def job_dir(job_id: str) -> Path:
    return STATE / job_id


def event(job: Path, kind: str, **fields) -> None:
    with (job / "history.jsonl").open("a") as f:
        f.write(json.dumps({"t": time.time(), "event": kind, **fields}) + "\n")


def history(job: Path) -> list:
    path = job / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def read(job: Path, name: str, default: str = "") -> str:
    try:
        return (job / name).read_text().strip()
    except FileNotFoundError:
        return default


def write(job: Path, name: str, text: str) -> None:
    tmp = job / f".{name}.tmp"
    tmp.write_text(f"{text}\n")
    tmp.rename(job / name)


JOB_KEY = re.compile(r"^\d+(\[\d+\])?$")  # JOBID, or JOBID[i]: one element of a job array


def forgotten(job: Path) -> bool:
    """Whether mbatchd has let go of a finished job: LSF keeps one CLEAN_PERIOD seconds after it finished (lsb.params,
    default 3600), then bjobs, bkill and brequeue no longer find it; bhist, which reads the event log, still does."""
    if read(job, "stat") not in ("DONE", "EXIT"):
        return False
    finished = [e["t"] for e in history(job) if e["event"] == "finish"]
    period = json.loads((job / "job.json").read_text()).get("clean_period_s", 3600)
    return bool(finished) and time.time() - finished[-1] > period


def existing_job(job_id: str, message: str) -> Path:
    job = job_dir(job_id)
    if not JOB_KEY.match(job_id) or not (job / "job.json").exists() or forgotten(job):
        refuse(message)
    return job


def elements(job_id: str) -> list:
    """The jobs an id names: a job array's id names every element (JOBID[i]), any other id itself."""
    path = job_dir(job_id) / "job.json"
    if JOB_KEY.match(job_id) and path.exists():
        indices = json.loads(path.read_text()).get("array")
        if indices:
            return [f"{job_id}[{i}]" for i in indices]
    return [job_id]


def is_array(job: Path) -> bool:
    return bool(json.loads((job / "job.json").read_text()).get("array")) if (job / "job.json").exists() else False


def sort_key(key: str) -> tuple:
    """1000 < 1000[2] < 1000[10] < 1001."""
    found = re.match(r"^(\d+)(?:\[(\d+)\])?$", key)
    return (int(found.group(1)), int(found.group(2) or 0)) if found else (0, 0)
