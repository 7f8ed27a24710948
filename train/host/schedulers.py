"""Scheduler adapters: each owns its scheduler's facts (launch shapes it supports, time-limit format, log file
names, state names mapped onto one `State`, how a job is requeued) and its commands (submit, state, accounting,
cancel); the interface and the `State` vocabulary are in train/host/scheduler_base.py.

Nothing else in `train/host/` branches on a scheduler's name: it asks the adapter (`adapter(job.scheduler)`).
"""
import os
import pwd
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Dict, Optional, Tuple

from train.errors import UserError
# the vocabulary, re-exported: the rest of train/host asks this module for everything about schedulers
from train.host.scheduler_base import (FINISHED, MODULE_NAME, NOT_STARTED, SAFE_NAME, Scheduler, State,  # noqa: F401
                                       run_or_refuse)
from train.registry import unknown_name


# sbatch's words when it is installed but no controller answers (this machine is no cluster's login node)
SLURM_UNREACHABLE = ("Could not establish a configuration source", "Unable to contact slurm controller")


class Slurm(Scheduler):
    name = "slurm"
    default_launch = "srun"
    launches = ("srun", "lightning", "independent")
    multi_node_launches = ("srun",)
    requeue_command = 'scontrol requeue "$SLURM_JOB_ID"'
    job_id_var = "$SLURM_JOB_ID"
    hosts_var = "$SLURM_JOB_NODELIST"
    directive_prefix = "#SBATCH"
    short_options = {"-A": "account", "-b": "begin", "-c": "cpus-per-task", "-C": "constraint", "-d": "dependency",
                     "-D": "chdir", "-e": "error", "-G": "gpus", "-J": "job-name", "-N": "nodes", "-n": "ntasks",
                     "-o": "output", "-p": "partition", "-q": "qos", "-t": "time", "-w": "nodelist", "-x": "exclude"}
    option_groups = (frozenset({"mem", "mem-per-cpu", "mem-per-gpu"}), frozenset({"gpus-per-node", "gpus", "gres"}),
                     frozenset({"ntasks", "ntasks-per-node"}), frozenset({"requeue", "no-requeue"}))
    option_keys = {"partition": "partition", "account": "account (your settings file)", "qos": "qos",
                   "constraint": "constraint", "reservation": "reservation", "nodes": "nodes", "exclusive": "exclusive",
                   "gpus/gpus-per-node/gres": "gpus_per_node, and the partition's gpu_type and gpu_request",
                   "cpus-per-task": "cpus_per_task", "hint": "hint", "time": "time", "signal": "grace_s",
                   "mem/mem-per-cpu/mem-per-gpu": "mem_gb, mem_per_gpu_gb or mem_per_cpu_gb",
                   "mail-type": "notify", "mail-user": "email (your settings file)"}

    # scontrol and sacct show a job's flags in place of its base state (slurm's job_state_string)
    STATES = {"COMPLETING": "RUNNING", "SIGNALING": "RUNNING", "STAGE_OUT": "RUNNING", "RESIZING": "RUNNING",
              "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING", "SPECIAL_EXIT": "PENDING",
              "RESV_DEL_HOLD": "PENDING", "STOPPED": "SUSPENDED", "REVOKED": "CANCELLED"}
    FORGOTTEN = ("Invalid job id specified", "not found")  # scontrol on a job past MinJobAge, an array's element
    accounting_name = "sacct"

    array_replaces = ("output", "job-name")
    array_index = "SLURM_ARRAY_TASK_ID"
    array_log = 'job-"$SLURM_ARRAY_JOB_ID"_"$SLURM_ARRAY_TASK_ID".out'

    def array_directives(self, name: str, count: int, cap: int, logs: str) -> Tuple[str, ...]:
        # %cap: Slurm's ArrayTaskThrottle, at most cap elements at once
        return (f"#SBATCH --job-name={name}", f"#SBATCH --array=0-{count - 1}%{cap}",
                f"#SBATCH --output={logs}/array-%A_%a.out")

    def element_id(self, array_id: str, index: int) -> str:
        return f"{array_id}_{index}"

    def log_name(self, job_name: str) -> str:
        return "job-%j.out"

    def test_script(self, script: Path) -> Optional[Tuple[bool, str]]:
        if not shutil.which("sbatch"):
            return None
        done = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True)
        said = (done.stderr + done.stdout).strip().splitlines()
        if any(reason in line for line in said for reason in SLURM_UNREACHABLE):
            return None  # sbatch is here but no cluster answers: nothing to learn about the script
        return done.returncode == 0, said[-1] if said else f"exit status {done.returncode}"

    def submit(self, script: Path, run_dir: Path) -> str:
        out = run_or_refuse(["sbatch", "--parsable", str(script)], "sbatch")
        return out.strip().split(";")[0]

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        """{'state': State.RUNNING, 'exit_code': '0:0', 'nodes': 'n[1-2]'}; scontrol, since sacct needs accounting."""
        done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
        if done.returncode != 0:
            return {"state": State.UNKNOWN, "gone": any(word in done.stderr + done.stdout for word in self.FORGOTTEN)}
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        state = State.of(fields.get("JobState", ""), self.STATES)
        return {"state": state, "exit_code": fields.get("ExitCode", ""), "nodes": fields.get("NodeList", ""),
                "reason": fields.get("Reason", "") if state == State.PENDING else "",
                "restarts": fields.get("Restarts", "0") if fields.get("Restarts", "0") != "0" else ""}

    def accounting(self, job_id: str) -> Optional[Dict[str, str]]:
        """sacct's line for the job; an array element that never started is only in its array's line (2_[1-3%2])."""
        array, _, index = job_id.partition("_")
        try:
            done = subprocess.run(["sacct", "-X", "-n", "-P", "-j", array, "-o", "JobID,State,ExitCode,NodeList"],
                                  capture_output=True, text=True)
        except FileNotFoundError:
            return None
        for line in done.stdout.splitlines() if done.returncode == 0 else []:
            listed, said, exit_code, nodes = (line.split("|") + ["", "", ""])[:4]
            if listed == job_id or (index and index_in(listed, array, int(index))):
                word, _, uid = said.partition(" by ")  # CANCELLED by 1234
                return {"state": State.of(word, self.STATES), "exit_code": exit_code, "nodes": nodes,
                        "said": f"sacct: {word}" + (f" by {user_of(uid)}" if uid else "")}
        return None

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        run_or_refuse(["scancel", job_id], "scancel")


def index_in(listed: str, array: str, index: int) -> bool:
    """Whether sacct's `ARRAY_[1-3,5%2]` (the elements not started yet, as one line) holds `index`."""
    found = re.fullmatch(re.escape(array) + r"_\[([\d,:-]+)(%\d+)?\]", listed)
    for part in found.group(1).split(",") if found else []:
        first, _, rest = part.partition("-")
        last, _, step = rest.partition(":")
        if int(first) <= index <= int(last or first) and (index - int(first)) % int(step or 1) == 0:
            return True
    return False


def user_of(uid: str) -> str:
    """sacct's `by 1234` as `uid 1234 (alice)`."""
    try:
        return f"uid {uid} ({pwd.getpwuid(int(uid)).pw_name})"
    except (KeyError, ValueError):
        return f"uid {uid}"


class Lsf(Scheduler):
    name = "lsf"
    partition_word = "queue"
    default_launch = "lightning"
    launches = ("lightning", "blaunch")
    multi_node_launches = ("blaunch",)
    time_format = re.compile(r"^\d+(:[0-5]\d)?$")  # bsub -W [hour:]minute
    time_example = "4:00"
    # an array element is JOBID[index] (LSB_JOBINDEX is 0 or unset outside an array): brequeue JOBID would requeue all
    requeue_command = 'brequeue "$LSB_JOBID$([ "${LSB_JOBINDEX:-0}" = 0 ] || echo "[$LSB_JOBINDEX]")"'
    job_id_var = "$LSB_JOBID"
    hosts_var = "$LSB_HOSTS"
    directive_prefix = "#BSUB"
    constraint_join = " && "
    unsupported = {
        ("qos", ""): "LSF has no QOS; choose the queue that gives that service (a partition entry)",
        ("hint", ""): "LSF has no --hint; give cpus_per_task in the slots (cores) you want",
        ("gpu_request", "gres"): "LSF asks for GPUs with -gpu; use gpu_request: count or typed (gmodel=)",
        ("gpu_request", "typed-gres"): "LSF asks for GPUs with -gpu; use gpu_request: count or typed (gmodel=)",
    }
    repeatable = ("R",)  # LSF merges the sections of several -R strings
    option_keys = {"q": "partition", "P": "account (your settings file)", "gpu": "gpus_per_node, gpu_type, gpu_mem_gb",
                   "n": "nodes and cpus_per_task", "W": "time", "x": "exclusive", "U": "reservation",
                   "wt": "grace_s", "u": "email (your settings file)"}
    STATES = {"PEND": "PENDING", "PSUSP": "PENDING", "RUN": "RUNNING", "USUSP": "SUSPENDED", "SSUSP": "SUSPENDED",
              "DONE": "COMPLETED", "EXIT": "FAILED"}

    array_replaces = ("o", "e", "J")
    array_index = "LSB_JOBINDEX - 1"  # LSF's indices start at 1
    array_log = '{name}_"$LSB_JOBID"_"$LSB_JOBINDEX".out'

    def array_directives(self, name: str, count: int, cap: int, logs: str) -> Tuple[str, ...]:
        # LSF's job array: -J "name[1-N]%K" runs at most K elements at once; %J and %I name each element's output
        return (f'#BSUB -J "{name}[1-{count}]%{cap}"', f"#BSUB -o {logs}/array_%J_%I.out",
                f"#BSUB -e {logs}/array_%J_%I.err")

    def element_id(self, array_id: str, index: int) -> str:
        return f"{array_id}[{index + 1}]"

    def log_name(self, job_name: str) -> str:
        return f"{job_name}_%J.out"

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
        if done.returncode != 0 or not fields:  # mbatchd forgets a finished job after CLEAN_PERIOD (lsb.params)
            return {"state": State.UNKNOWN, "gone": "is not found" in done.stderr}
        return {"state": State.of(fields[0], self.STATES), "exit_code": fields[1] if len(fields) > 1 else "",
                "nodes": fields[2] if len(fields) > 2 else ""}

    accounting_name = "bhist"
    # bhist -l's events (IBM's wording), in the order they happen to a job: the last one found is its state
    EVENTS = ((r"Submitted from host", State.PENDING), (r"Starting \(Pid", State.RUNNING),
              (r"Pending: Job has been requeued", State.PENDING), (r"Done successfully", State.COMPLETED),
              (r"Exited with exit code|Exited;", State.FAILED), (r"\bTERM_OWNER\b", State.CANCELLED),
              (r"\bTERM_RUNLIMIT\b", State.TIMEOUT))

    def accounting(self, job_id: str) -> Optional[Dict[str, str]]:
        """bhist -l, which reads LSF's event log: it still answers after bjobs has forgotten the job."""
        try:
            done = subprocess.run(["bhist", "-l", job_id], capture_output=True, text=True)
        except FileNotFoundError:
            return None
        text = re.sub(r"\n +", "", done.stdout)  # bhist wraps long lines, indenting the rest
        found = [(m.start(), state, m.group(0)) for pattern, state in self.EVENTS
                 for m in re.finditer(pattern + r"[^;.]*", text)]
        if done.returncode != 0 or not found:
            return None
        _, state, said = max(found, key=lambda f: f[0])
        by = re.findall(r"Signal <KILL> requested by user or administrator <([^>]+)>", text)
        code = re.findall(r"Exited with exit code (\d+)", text)
        return {"state": state, "exit_code": code[-1] if code else "", "nodes": "",
                "said": f"bhist: {said.strip()}" + (f", KILL requested by {by[-1]}" if by and state == State.CANCELLED
                                                     else "")}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        run_or_refuse(["bkill", job_id], "bkill")


class Local(Scheduler):
    """This machine, no scheduler: the script runs detached; its pid is the job id."""

    name = "local"
    default_launch = "lightning"
    launches = ("lightning",)
    follow_by_default = True
    unsupported = {(key, ""): "this machine has no scheduler to ask; remove it"
                   for key in ("qos", "constraint", "reservation", "exclusive", "hint")}

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


SCHEDULERS: Dict[str, Scheduler] = {s.name: s for s in (Slurm(), Lsf(), Local())}


def adapter(name: str) -> Scheduler:
    if name not in SCHEDULERS:
        raise UserError(unknown_name("scheduler", name, sorted(SCHEDULERS)))
    return SCHEDULERS[name]
