"""Slurm's adapter: sbatch, scontrol, sacct and scancel, its state words on `State`, job arrays, requeue; its job
script is templates/slurm.sh.j2 (the contract it fills in is
documented on cluster_train/host/schedulers/base.py's Scheduler)."""
import pwd
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from cluster_train.host.schedulers.base import Inventory, Scheduler, State, run_or_refuse
from cluster_train.host.schedulers.sessions import SlurmSession
from cluster_train.host.schedulers.slurm_allocations import allocations as sacct_allocations
from cluster_train.host.schedulers.slurm_failures import (DIED_RANK, FAILED_NODES, LEAVE_OUT_PENDING, RANK_SAVED,
                                                          REQUEUED_UNDER_US)
from cluster_train.host.schedulers.slurm_estimates import pending_start, test_only_start, test_only_verdict
from cluster_train.host.schedulers.slurm_header import gpu_options, memory_options, present
import cluster_train.host.schedulers.slurm_inventory as live
from cluster_train.host.schedulers.slurm_usage import usage as sacct_usage
from cluster_train.host.scheduling.job import ResolvedJob

# sbatch's words when it is installed but no controller answers (this machine is no cluster's login node)
SLURM_UNREACHABLE = ("Could not establish a configuration source", "Unable to contact slurm controller")
# srun --cpu-bind=[{quiet|verbose},]<type> (srun(1)); the lists take an item*count repeat, masks are hexadecimal
_IDS, _MASKS = r"\d+(\*\d+)?(,\d+(\*\d+)?)*", r"(0x)?[0-9a-fA-F]+(\*\d+)?(,(0x)?[0-9a-fA-F]+(\*\d+)?)*"
_LDOMS = r"(0x[0-9a-fA-F]+|\d+)(,(0x[0-9a-fA-F]+|\d+))*"
_BIND = (rf"(no|none|rank|rank_ldom|sockets|cores|threads|ldoms|map_cpu:{_IDS}|mask_cpu:{_MASKS}|map_ldom:{_LDOMS}"
         rf"|mask_ldom:{_MASKS})")
CPU_BIND = re.compile(rf"^(q|quiet|v|verbose)$|^((q|quiet|v|verbose),)?{_BIND}$")
CPU_BIND_WORDS = ("none, cores, threads, sockets, ldoms, rank, rank_ldom, map_cpu:IDS, mask_cpu:MASKS, map_ldom:IDS, "
                  "mask_ldom:MASKS, each optionally after verbose, (e.g. cores, verbose,cores, map_cpu:0,16,32,48)")


class Slurm(Scheduler):
    name = "slurm"
    session = SlurmSession()  # run-cluster shell
    title = "Slurm"  # its name in prose
    template = "slurm.sh.j2"
    default_launch = "srun"
    launches = ("srun", "lightning", "independent")
    requeue_command = 'scontrol requeue "$SLURM_JOB_ID"'
    # the batch shell's words for a failure Slurm itself acts on, and for the rank that died (slurm_failures.py)
    requeued_under_us, failed_nodes, died_rank, rank_saved = REQUEUED_UNDER_US, FAILED_NODES, DIED_RANK, RANK_SAVED
    leave_out_pending = LEAVE_OUT_PENDING
    cancel_self = 'scancel "$SLURM_JOB_ID"'
    max_warning_s = 65535  # sbatch --signal=B:USR1@sig_time: "an integer between 0 and 65535"
    job_id_var = "$SLURM_JOB_ID"
    hosts_var = "$SLURM_JOB_NODELIST"
    each_node = ('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 '
                 '--kill-on-bad-exit=1 "$@"')
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
                   "mem/mem-per-cpu/mem-per-gpu": "mem_gb, mem_per_gpu_gb, mem_per_cpu_gb or whole_node",
                   "mail-type": "notify", "mail-user": "email (your settings file)"}

    # scontrol and sacct show a job's flags in place of its base state (slurm's job_state_string)
    STATES = {"COMPLETING": "RUNNING", "SIGNALING": "RUNNING", "STAGE_OUT": "RUNNING", "RESIZING": "RUNNING",
              "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING", "SPECIAL_EXIT": "PENDING",
              "RESV_DEL_HOLD": "PENDING", "STOPPED": "SUSPENDED", "REVOKED": "CANCELLED"}
    FORGOTTEN = ("Invalid job id specified", "not found")  # scontrol on a job past MinJobAge, an array's element
    accounting_name = "sacct"
    commands = ("sbatch", "squeue", "sinfo", "scontrol", "sacct", "scancel")
    version_command = ("sinfo", "--version")
    ping_command = ("scontrol", "ping")  # exit 1 and "is DOWN" when slurmctld does not answer
    controller = "slurmctld"

    array_replaces = ("output", "job-name")
    array_index = "SLURM_ARRAY_TASK_ID"
    array_log = 'job-"$SLURM_ARRAY_JOB_ID"_"$SLURM_ARRAY_TASK_ID".out'

    def directives(self, job: "ResolvedJob") -> List[str]:
        place = job.placement
        options = [f"--job-name={job.job_name}",
                   *present(partition=place.queue, account=place.account, qos=place.qos,
                            constraint=place.constraint.replace(" ", ""), reservation=place.reservation),
                   f"--nodes={place.nodes}", *(["--exclusive"] if place.exclusive else []),
                   f"--ntasks-per-node={place.tasks_per_node}", *gpu_options(place),
                   f"--cpus-per-task={place.cpus_per_task}", *present(hint=place.hint), *memory_options(place),
                   f"--time={place.time}", f"--output={job.work.log_path}", "--open-mode=append",
                   f"--signal=B:USR1@{place.grace_s}", "--requeue"]
        if job.notify.wanted:
            options += ["--mail-type=BEGIN,END,FAIL", *present(**{"mail-user": job.notify.email})]
        return options + list(place.directives)

    def owned_options(self, job: "ResolvedJob") -> List[str]:
        """directives()'s own options, by name, from the same typed values (test_job_pieces holds the two alike)."""
        place, notify = job.placement, job.notify
        sets = [("job-name", True), ("partition", place.queue), ("account", place.account), ("qos", place.qos),
                ("constraint", place.constraint.replace(" ", "")), ("reservation", place.reservation),
                ("nodes", True), ("exclusive", place.exclusive), ("ntasks-per-node", True),
                ("gpus-per-node", place.gpus_per_node), ("cpus-per-task", True), ("hint", place.hint),
                ("mem", place.whole_node or place.mem_per_gpu_gb or place.mem_per_cpu_gb or place.mem_gb is not None),
                ("time", True), ("output", True), ("open-mode", True), ("signal", True), ("requeue", True),
                ("mail-type", notify.wanted), ("mail-user", notify.wanted and notify.email)]
        return [self.canonical(name) for name, given in sets if given]  # --gres, --mem-per-gpu: in their groups

    def requeue_leaving_out(self, job: "ResolvedJob") -> str:
        # scontrol refuses ExcNodeList while the job runs ("no longer pending"); once `scontrol requeue` returns the
        # job is pending again (long before its BeginTime lets it start), and the requeue's SIGTERM to this shell
        # follows within milliseconds, or seconds on a busy controller. The exclusion is set at once, then in the
        # trap again, tried for 3 s: a busy test cluster once lost it to a single try in the trap (KillWait 5 s).
        retried = f"for ct_try in 1 2 3; do {self.leave_out_pending} && break; sleep 1; done"
        return (f"trap '{retried}; exit 0' TERM; {self.requeue_command}; {self.leave_out_pending} 2>/dev/null || true; "
                "sleep 60 & wait $!")

    def task_step(self, job: "ResolvedJob") -> List[str]:
        """srun's options for one packed task: one GPU, its share of the job's memory (the template's comment says
        why), its CPUs."""
        mem_gb = job.placement.mem_gb
        memory = [] if mem_gb is None else [f"--mem={mem_gb * 1024 // len(job.work.tasks)}M"]
        return ["--exact", "--ntasks=1", "--nodes=1", "--gpus-per-node=1", *memory,
                f"--cpus-per-task={job.placement.cpus_per_task}", *self.rank_step(job)]

    def rank_step(self, job: "ResolvedJob") -> List[str]:
        """srun's options of every step that runs training ranks: the job ends when one of them fails."""
        bind = job.placement.cpu_bind
        return ["--kill-on-bad-exit=1", *([f"--cpu-bind={shlex.quote(bind)}"] if bind else [])]

    def array_directives(self, name: str, count: int, cap: int, logs: str) -> Tuple[str, ...]:
        # %cap: Slurm's ArrayTaskThrottle, at most cap elements at once
        return (f"#SBATCH --job-name={name}", f"#SBATCH --array=0-{count - 1}%{cap}",
                f"#SBATCH --output={logs}/array-%A_%a.out")

    def after_directive(self, job_id: str) -> Optional[str]:
        return f"#SBATCH --dependency=afterany:{job_id}"  # afterany: a failed or cancelled element still ends it

    def array_limit(self) -> Optional[int]:
        """MaxArraySize (indices 0 to MaxArraySize - 1) as the controller says it, else Slurm's default, 1001."""
        found = live.config("MaxArraySize") or ""
        return int(found) if found.isdigit() else 1001

    def cluster_here(self) -> Optional[str]:
        return live.config("ClusterName")

    def element_id(self, array_id: str, index: int) -> str:
        return f"{array_id}_{index}"

    def log_name(self, job_name: str) -> str:
        return "job-%j.out"

    def cpu_bind_problem(self, value: str) -> str:
        if CPU_BIND.match(value):
            return ""
        return f"cpu_bind {value!r} is not one of srun's --cpu-bind values; use one of: {CPU_BIND_WORDS}"

    def inventory(self) -> Optional[Inventory]:
        return live.inventory()

    def test_script(self, script: Path) -> Optional[Tuple[bool, str]]:
        if not shutil.which("sbatch"):
            return None
        done = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True)
        said = (done.stderr + done.stdout).strip().splitlines()
        if any(reason in line for line in said for reason in SLURM_UNREACHABLE):
            return None  # sbatch is here but no cluster answers: nothing to learn about the script
        return test_only_verdict(done.returncode, said)

    def start_estimate(self, script: Path) -> str:
        return test_only_start(self.test_script(script))

    def wait_options(self, job_ids: Sequence[str]) -> Optional[List[str]]:
        # afterok: start once each has COMPLETED; --kill-on-invalid-dep: cancel it (CANCELLED, Reason
        # DependencyNeverSatisfied) once one ended otherwise, rather than pend forever
        return [f"--dependency=afterok:{':'.join(job_ids)}", "--kill-on-invalid-dep=yes"]

    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        waits = self.wait_options(after) if after else []
        out = run_or_refuse(["sbatch", "--parsable", *waits, str(script)], "sbatch")
        return out.strip().split(";")[0]

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        """{'state': State.RUNNING, 'exit_code': '0:0', 'nodes': 'n[1-2]'}; scontrol, since sacct needs accounting."""
        done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
        if done.returncode != 0:
            return {"state": State.UNKNOWN, "gone": any(word in done.stderr + done.stdout for word in self.FORGOTTEN)}
        return self.live(dict(re.findall(r"(\w+)=(\S*)", done.stdout)))

    def live(self, fields: Dict[str, str]) -> Dict[str, str]:
        """One job's line of `scontrol show job -o`, as state() answers."""
        state = State.of(fields.get("JobState", ""), self.STATES)
        return {"state": state, "exit_code": fields.get("ExitCode", ""), "nodes": fields.get("NodeList", ""),
                "reason": fields.get("Reason", "") if state == State.PENDING else "",
                "start": pending_start(fields) if state == State.PENDING else "",
                "restarts": fields.get("Restarts", "0") if fields.get("Restarts", "0") != "0" else ""}

    def array_states(self, array_id: str) -> Optional[Dict[str, Dict[str, str]]]:
        """Every element the controller still knows, from one scontrol call (the elements not started yet are one
        line, ArrayTaskId=5-999%4); {} when it has forgotten the whole array, None when it did not answer."""
        done = subprocess.run(["scontrol", "show", "job", "-o", array_id], capture_output=True, text=True)
        if done.returncode != 0:
            return {} if any(word in done.stderr + done.stdout for word in self.FORGOTTEN) else None
        found = {}
        for line in done.stdout.splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            for index in array_indices(fields.get("ArrayTaskId", "")):
                found[f"{array_id}_{index}"] = self.live(fields)
        return found

    def array_accounting(self, array_id: str) -> Optional[Dict[str, Dict[str, str]]]:
        """sacct's record of every element, from one call; None without accounting."""
        lines = self.sacct_lines(array_id)
        if lines is None:
            return None
        found = {}
        for listed, said, exit_code, nodes in lines:
            record = self.accounting_record(said, exit_code, nodes)
            _, _, tasks = listed.partition("_")
            for index in array_indices(tasks.strip("[]")):
                found[f"{array_id}_{index}"] = record
        return found

    def accounting(self, job_id: str) -> Optional[Dict[str, str]]:
        """sacct's line for the job; an array element that never started is only in its array's line (2_[1-3%2])."""
        array, _, index = job_id.partition("_")
        for listed, said, exit_code, nodes in self.sacct_lines(array) or []:
            if listed == job_id or (index and index_in(listed, array, int(index))):
                return self.accounting_record(said, exit_code, nodes)
        return None

    def sacct_lines(self, job: str) -> Optional[List[Tuple[str, str, str, str]]]:
        """(JobID, State, ExitCode, NodeList) of the job (an array: each element's line); None without sacct."""
        try:
            done = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "JobID,State,ExitCode,NodeList"],
                                  capture_output=True, text=True)
        except FileNotFoundError:
            return None
        if done.returncode != 0:
            return []
        return [tuple((line.split("|") + ["", "", ""])[:4]) for line in done.stdout.splitlines()]

    def accounting_record(self, said: str, exit_code: str, nodes: str) -> Dict[str, str]:
        word, _, uid = said.partition(" by ")  # CANCELLED by 1234
        return {"state": State.of(word, self.STATES), "exit_code": exit_code, "nodes": nodes,
                "said": f"sacct: {word}" + (f" by {user_of(uid)}" if uid else "")}

    def associations(self) -> Optional[Dict[str, Tuple[str, ...]]]:
        return live.qos_by_account()

    def allocations(self, job_id: str) -> Optional[List[Dict]]:
        return sacct_allocations(job_id, self.STATES)

    def usage(self, job_id: str = "", since: str = "", account: str = "") -> Optional[List[Dict[str, float]]]:
        return sacct_usage(job_id, since, account)

    def gpu_hour_limits(self) -> Dict[str, float]:
        return live.gpu_hour_limits()

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        run_or_refuse(["scancel", job_id], "scancel")


def array_indices(tasks: str) -> List[int]:
    """Slurm's ArrayTaskId (`3`, `5-999%4`, `1,3-7:2`) as the indices it holds."""
    found = []
    for part in tasks.split("%")[0].split(",") if tasks else []:
        first, _, rest = part.partition("-")
        last, _, step = rest.partition(":")
        if first.isdigit() and (last or first).isdigit():
            found.extend(range(int(first), int(last or first) + 1, int(step or 1)))
    return found


def index_in(listed: str, array: str, index: int) -> bool:
    """Whether sacct's `ARRAY_[1-3,5%2]` (the elements not started yet, as one line) holds `index`."""
    found = re.fullmatch(re.escape(array) + r"_\[([\d,:-]+)(%\d+)?\]", listed)
    return bool(found) and index in array_indices(found.group(1))


def user_of(uid: str) -> str:
    """sacct's `by 1234` as `uid 1234 (alice)`."""
    try:
        return f"uid {uid} ({pwd.getpwuid(int(uid)).pw_name})"
    except (KeyError, ValueError):
        return f"uid {uid}"
