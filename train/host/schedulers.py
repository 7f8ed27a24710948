"""Scheduler adapters: submit a rendered script, ask a job's state, cancel it. One class per scheduler."""
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

from train.errors import UserError
from train.registry import Registry

SCHEDULERS = Registry("scheduler")
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


def _run(cmd, what: str) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise UserError(f"{cmd[0]} is not on PATH: run this on the cluster's login node") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"{what} failed: {message[-1] if message else 'exit status ' + str(done.returncode)}")
    return done.stdout


@SCHEDULERS.register("slurm")
class Slurm:
    def submit(self, script: Path, run_dir: Path) -> str:
        out = _run(["sbatch", "--parsable", str(script)], "sbatch")
        return out.strip().split(";")[0]

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        """{'state': 'RUNNING', 'exit_code': '0:0', 'nodes': 'n[1-2]'}; scontrol, since sacct needs accounting."""
        done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
        if done.returncode != 0:
            return {"state": "UNKNOWN"}
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        return {"state": fields.get("JobState", "UNKNOWN"), "exit_code": fields.get("ExitCode", ""),
                "nodes": fields.get("NodeList", "")}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        _run(["scancel", job_id], "scancel")


@SCHEDULERS.register("lsf")
class Lsf:
    STATES = {"PEND": "PENDING", "PSUSP": "PENDING", "RUN": "RUNNING", "USUSP": "SUSPENDED", "SSUSP": "SUSPENDED",
              "DONE": "COMPLETED", "EXIT": "FAILED"}

    def submit(self, script: Path, run_dir: Path) -> str:
        # `bsub < script`: only then does bsub read the #BSUB lines of the script.
        with script.open() as stdin:
            try:
                done = subprocess.run(["bsub"], stdin=stdin, capture_output=True, text=True)
            except FileNotFoundError:
                raise UserError("bsub is not on PATH: run this on the cluster's login node") from None
        found = re.search(r"Job <(\d+)> is submitted", done.stdout)
        if done.returncode != 0 or not found:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise UserError(f"bsub failed: {message[-1] if message else 'exit status ' + str(done.returncode)}")
        return found.group(1)

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        done = subprocess.run(["bjobs", "-noheader", "-o", "stat exit_code exec_host", job_id],
                              capture_output=True, text=True)
        fields = done.stdout.split()
        if done.returncode != 0 or not fields:
            return {"state": "UNKNOWN"}
        return {"state": self.STATES.get(fields[0], fields[0]), "exit_code": fields[1] if len(fields) > 1 else "",
                "nodes": fields[2] if len(fields) > 2 else ""}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        _run(["bkill", job_id], "bkill")


@SCHEDULERS.register("local")
class Local:
    """This machine, no scheduler: the script runs detached; its pid is the job id."""

    def submit(self, script: Path, run_dir: Path) -> str:
        log = run_dir / "logs" / "job.out"
        status = run_dir / "logs" / "exit_code"
        wrapper = 'bash "$1" >"$2" 2>&1; echo $? >"$3"'
        proc = subprocess.Popen(
            ["bash", "-c", wrapper, "local-job", str(script), str(log), str(status)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        (run_dir / "logs" / "pid").write_text(f"{proc.pid}\n")
        return str(proc.pid)

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        status = run_dir / "logs" / "exit_code" if run_dir else None
        if status and status.is_file() and status.read_text().strip():
            code = status.read_text().strip()
            if code == "cancelled":
                return {"state": "CANCELLED"}
            return {"state": "COMPLETED" if code == "0" else "FAILED", "exit_code": code}
        try:
            os.kill(int(job_id), 0)
            return {"state": "RUNNING"}
        except (ProcessLookupError, ValueError):
            return {"state": "UNKNOWN"}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        try:
            os.killpg(int(job_id), signal.SIGTERM)
        except ProcessLookupError:
            return  # already ended: its exit code stands
        if run_dir is not None:
            (run_dir / "logs" / "exit_code").write_text("cancelled\n")


def wait(scheduler, job_id: str, run_dir: Path, timeout_s: float, poll_s: float = 1.0) -> Dict[str, str]:
    """Poll until the job ends (sbatch --wait polls only every ~10 s)."""
    deadline = time.time() + timeout_s
    while True:
        state = scheduler.state(job_id, run_dir)
        if state["state"] in FINISHED:
            return state
        if time.time() > deadline:
            raise UserError(f"job {job_id} did not finish within {timeout_s:.0f} s (state {state['state']})")
        time.sleep(poll_s)


def race(scheduler, job_ids, run_dirs, timeout_s: float, poll_s: float = 1.0) -> int:
    """Index of the job that starts first; the other is cancelled. On a tie the first one listed wins."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        states = [scheduler.state(j, d)["state"] for j, d in zip(job_ids, run_dirs)]
        started = [s not in ("PENDING", "UNKNOWN", "CONFIGURING") for s in states]
        if any(started):
            winner = started.index(True)
            scheduler.cancel(job_ids[1 - winner], run_dirs[1 - winner])
            return winner
        time.sleep(poll_s)
    raise UserError(f"neither job {job_ids[0]} nor {job_ids[1]} started within {timeout_s:.0f} s; both are still queued")
