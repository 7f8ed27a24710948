"""The local runner's adapter: no scheduler, the job script runs detached on this machine and its process id is the
job id; its job script is templates/local.sh.j2 (the contract is documented on base.py's Scheduler)."""
import os
import signal
import subprocess
from pathlib import Path
from typing import Dict, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.schedulers.base import Scheduler, State


class Local(Scheduler):
    """This machine, no scheduler: the script runs detached; its pid is the job id."""

    name = "local"
    template = "local.sh.j2"
    default_launch = "lightning"
    launches = ("lightning",)
    follow_by_default = True
    unsupported = {(key, ""): "this machine has no scheduler to ask; remove it"
                   for key in ("qos", "constraint", "reservation", "exclusive", "hint", "cpu_bind")}

    def start_estimate(self, script: Path) -> str:
        return ""  # it starts at once, on this machine

    def array_directives(self, name: str, count: int, cap: int, logs: str) -> Tuple[str, ...]:
        return ()  # no scheduler: the sweep's script runs the elements itself, at most cap at once

    def element_id(self, array_id: str, index: int) -> str:
        return array_id  # the sweep script's process group; each element's logs/exit_code tells its own end

    def array_cap(self, cpus_per_run: int) -> int:
        return max(1, (os.cpu_count() or 1) // max(1, cpus_per_run))  # as many as this machine has CPUs for

    def cancel_array(self, array_id: str, sweep_dir: Path, run_dirs) -> None:
        self.cancel(array_id, sweep_dir)
        for run_dir in run_dirs:  # the elements that had not ended, started or not
            status = Path(run_dir) / "logs" / "exit_code"
            if not status.is_file():
                status.write_text("cancelled\n")

    def log_name(self, job_name: str) -> str:
        return "job.out"

    def submit(self, script: Path, run_dir: Path) -> str:
        log = run_dir / "logs" / "job.out"
        status = run_dir / "logs" / "exit_code"
        status.unlink(missing_ok=True)  # a resumed run's earlier exit code would end its wait at once
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
                return {"state": State.CANCELLED}
            return {"state": State.COMPLETED if code == "0" else State.FAILED, "exit_code": code}
        try:
            os.kill(pid(job_id), 0)
            return {"state": State.RUNNING}
        except ProcessLookupError:  # no such process: it ended without its exit status
            return {"state": State.UNKNOWN, "gone": True}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        try:
            os.killpg(pid(job_id, lowest=2), signal.SIGTERM)
        except ProcessLookupError:
            return  # already ended: its exit code stands
        if run_dir is not None:
            (run_dir / "logs" / "exit_code").write_text("cancelled\n")


def pid(job_id: str, lowest: int = 1) -> int:
    """A local job's id, the process (group) it is; 0 would be our own process group, 1 init's."""
    if not job_id.isdigit() or int(job_id) < lowest:
        raise UserError(f"local job id {job_id!r} is not a process id; the run's manifest is damaged")
    return int(job_id)
