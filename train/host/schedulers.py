"""Scheduler adapters: each owns its scheduler's facts (launch shapes it supports, time-limit format, log file
names, state names mapped onto one `State`, how a job is requeued) and its commands (submit, state, cancel).

Nothing else in `train/host/` branches on a scheduler's name: it asks the adapter (`adapter(job.scheduler)`).
"""
import enum
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional, Pattern, Tuple

from train.errors import UserError
from train.registry import unknown_name


class State(str, enum.Enum):
    """One state vocabulary over every scheduler (Slurm's names; LSF's and the local runner's map onto them)."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    PREEMPTED = "PREEMPTED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def of(cls, name: str, aliases: Optional[Dict[str, str]] = None) -> "State":
        name = (aliases or {}).get(name, name)
        return cls.__members__.get(name, cls.UNKNOWN)


FINISHED = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.NODE_FAIL,
                      State.OUT_OF_MEMORY, State.BOOT_FAIL, State.DEADLINE, State.PREEMPTED})
# sbatch's words when it is installed but no controller answers (this machine is no cluster's login node)
SLURM_UNREACHABLE = ("Could not establish a configuration source", "Unable to contact slurm controller")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # what may appear unquoted in a scheduler directive
MODULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+/@-]*$")  # `module load NAME` (e.g. cuda/12.8)
NOT_STARTED = frozenset({State.PENDING, State.CONFIGURING, State.UNKNOWN})


def _run(cmd, what: str) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise UserError(f"{cmd[0]} is not on PATH: run this on the cluster's login node") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"{what} failed: {message[-1] if message else 'exit status ' + str(done.returncode)}")
    return done.stdout


class Scheduler:
    """The facts every adapter states; the commands each implements."""

    name: str
    partition_word = "partition"  # what the cluster file's `partitions:` are called in this scheduler's manuals
    default_launch: str
    launches: Tuple[str, ...]  # launch shapes this scheduler can start
    multi_node_launches: Tuple[str, ...] = ()  # of those, the ones that start ranks on several nodes
    # sbatch --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
    time_format: Pattern = re.compile(r"^\d+(:[0-5]\d){0,2}$|^\d+-(1?\d|2[0-3])(:[0-5]\d){0,2}$")
    time_example = "04:00:00 or 1-12:00:00"
    follow_by_default = False  # --wait unless --no-wait
    requeue_command = ""  # how the batch shell puts its own job back in the queue ("": it cannot)
    job_id_var = "$$"  # the job's id, as the batch shell reads it
    hosts_var = "$(hostname)"  # the job's hosts, as the batch shell reads them
    directive_prefix = ""  # how a script line hands an option to the scheduler ("": no directives)
    constraint_join = "&"  # how two node-feature expressions are both required
    # Profile and partition settings this scheduler has no way to express: key -> the fix.
    unsupported: Dict[Tuple[str, str], str] = {}
    short_options: Dict[str, str] = {}  # -p -> partition
    # Options that set the same thing in different words (--mem vs --mem-per-gpu): one of a group per script.
    option_groups: Tuple[frozenset, ...] = ()
    repeatable: Tuple[str, ...] = ()  # options a script may give more than once
    option_keys: Dict[str, str] = {}  # a rendered option -> the cluster-file key that sets it

    def option(self, directive: str) -> str:
        """The option a directive sets, in one spelling: '-p gpu', '--partition=gpu' -> 'partition'."""
        word = directive.split()[0].split("=")[0] if directive.split() else ""
        if word.startswith("--"):
            name = word[2:]
        else:
            name = self.short_options.get(word[:2], word.lstrip("-"))
        for group in self.option_groups:
            if name in group:
                return "/".join(sorted(group))
        return name

    # Job arrays (sweeps): the array's options, the element's 0-based index and its log, as the batch shell sees them
    array_replaces: Tuple[str, ...] = ()  # options of an element's script the array script sets itself
    array_index = ""  # shell arithmetic: the element's 0-based index
    array_log = ""  # the element's log file name in its run dir (shell words)

    def array_directives(self, name: str, count: int, cap: int, logs: str) -> Tuple[str, ...]:
        raise UserError(f"the {self.name} scheduler has no job arrays")

    def element_id(self, array_id: str, index: int) -> str:
        """The id of the array's element `index` (0-based), as the scheduler's commands take it."""
        raise NotImplementedError

    def array_cap(self, cpus_per_run: int) -> int:
        """How many elements of a sweep run at once unless --max-parallel says: a cluster's queue takes a few."""
        return 4

    def cancel_array(self, array_id: str, sweep_dir: Path, run_dirs) -> None:
        self.cancel(array_id, sweep_dir)  # the scheduler ends every element

    def log_name(self, job_name: str) -> str:
        raise NotImplementedError

    def test_script(self, script: Path) -> Optional[Tuple[bool, str]]:
        """The scheduler's own verdict on a script's directives without queuing it; None where it has no such
        check or its commands are not on this machine."""
        return None

    def submit(self, script: Path, run_dir: Path) -> str:
        raise NotImplementedError

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        raise NotImplementedError

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        raise NotImplementedError


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
        out = _run(["sbatch", "--parsable", str(script)], "sbatch")
        return out.strip().split(";")[0]

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        """{'state': State.RUNNING, 'exit_code': '0:0', 'nodes': 'n[1-2]'}; scontrol, since sacct needs accounting."""
        done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
        if done.returncode != 0:
            return {"state": State.UNKNOWN}
        fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout))
        state = State.of(fields.get("JobState", ""))
        return {"state": state, "exit_code": fields.get("ExitCode", ""), "nodes": fields.get("NodeList", ""),
                "reason": fields.get("Reason", "") if state == State.PENDING else "",
                "restarts": fields.get("Restarts", "0") if fields.get("Restarts", "0") != "0" else ""}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        _run(["scancel", job_id], "scancel")


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
        if done.returncode != 0 or not fields:
            return {"state": State.UNKNOWN}
        return {"state": State.of(fields[0], self.STATES), "exit_code": fields[1] if len(fields) > 1 else "",
                "nodes": fields[2] if len(fields) > 2 else ""}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        _run(["bkill", job_id], "bkill")


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
            os.kill(int(job_id), 0)
            return {"state": State.RUNNING}
        except (ProcessLookupError, ValueError):
            return {"state": State.UNKNOWN}

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        if not job_id.isdigit() or int(job_id) <= 1:  # killpg(0) would signal our own process group
            raise UserError(f"local job id {job_id!r} is not a process id; the run's manifest is damaged")
        try:
            os.killpg(int(job_id), signal.SIGTERM)
        except ProcessLookupError:
            return  # already ended: its exit code stands
        if run_dir is not None:
            (run_dir / "logs" / "exit_code").write_text("cancelled\n")


SCHEDULERS: Dict[str, Scheduler] = {s.name: s for s in (Slurm(), Lsf(), Local())}


def adapter(name: str) -> Scheduler:
    if name not in SCHEDULERS:
        raise UserError(unknown_name("scheduler", name, sorted(SCHEDULERS)))
    return SCHEDULERS[name]


def race(scheduler: Scheduler, job_ids, run_dirs, timeout_s: float, poll_s: float = 1.0) -> int:
    """Index of the job that starts first; the other is cancelled. On a tie the first one listed wins."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        states = [scheduler.state(j, d)["state"] for j, d in zip(job_ids, run_dirs)]
        started = [s not in NOT_STARTED for s in states]
        if any(started):
            winner = started.index(True)
            scheduler.cancel(job_ids[1 - winner], run_dirs[1 - winner])
            return winner
        time.sleep(poll_s)
    raise UserError(f"neither job {job_ids[0]} nor {job_ids[1]} started within {timeout_s:.0f} s; both are still queued")
