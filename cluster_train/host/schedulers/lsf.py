"""IBM Spectrum LSF's adapter: bsub, bjobs, bhist and bkill, its state words on `State`, job arrays, brequeue; its job
script is templates/lsf.sh.j2 (the contract it fills in is
documented on cluster_train/host/schedulers/base.py's Scheduler)."""
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.schedulers.base import Inventory, Scheduler, State, run_or_refuse
from cluster_train.host.schedulers.sessions import LsfSession
from cluster_train.host.schedulers.lsf_inventory import inventory as live_inventory
from cluster_train.host.schedulers.lsf_history import EXITED, exit_status, runs as bhist_runs
from cluster_train.host.schedulers.lsf_failures import FAILED_NODES, REQUEUED_UNDER_US
from cluster_train.host.scheduling.job import ResolvedJob, Placement

RUN_LIMIT = re.compile(r"^(?:(\d+):)?(\d+)(?:/[A-Za-z0-9_.-]+)?$")  # bsub -W [hour:]minute[/host]


class Lsf(Scheduler):
    name = "lsf"
    session = LsfSession()  # run-cluster shell
    title = "LSF"  # its name in prose
    template = "lsf.sh.j2"
    partition_word = "queue"
    default_launch = "lightning"
    launches = ("lightning", "blaunch")
    time_example = "4:00 or 36:00"
    default_time = "1:00"  # bsub -W [hour:]minute: one hour
    # an array element is JOBID[index] (LSB_JOBINDEX is 0 or unset outside an array): brequeue JOBID would requeue all
    this_job = '"$LSB_JOBID$([ "${LSB_JOBINDEX:-0}" = 0 ] || echo "[$LSB_JOBINDEX]")"'
    requeue_command = f"brequeue {this_job}"
    requeued_under_us, failed_nodes = REQUEUED_UNDER_US, FAILED_NODES  # a host's failure: lsf_failures.py
    cancel_self = f"bkill {this_job}"
    job_id_var = "$LSB_JOBID"
    hosts_var = "$LSB_HOSTS"
    # blaunch -z takes one host at a time here (the stand-in's form): one per host, all at once, the worst status
    each_node = ('local host pid rc=0 pids=(); for host in $(awk \'!seen[$1]++ {print $1}\' "$LSB_DJOB_HOSTFILE"); '
                 'do blaunch -z "$host" "$@" & pids+=($!); done; for pid in "${pids[@]}"; do wait "$pid" || rc=1; '
                 'done; return "$rc"')
    directive_prefix = "#BSUB"
    constraint_join = " && "
    unsupported = {
        ("qos", ""): "LSF has no QOS; choose the queue that gives that service (a partition entry)",
        ("hint", ""): "LSF has no --hint; give cpus_per_task in the slots (cores) you want",
        ("gpu_request", "gres"): "LSF asks for GPUs with -gpu; use gpu_request: count or typed (gmodel=)",
        ("gpu_request", "typed-gres"): "LSF asks for GPUs with -gpu; use gpu_request: count or typed (gmodel=)",
        # LSF documents no rusage[mem] value for "all of the host's memory" (Slurm's --mem=0)
        ("whole_node", ""): "LSF has no request for all of a host's memory; give mem_gb (the host's memory, which "
                            "rusage[mem] reserves), with exclusive: true for the host to yourself",
        ("cpu_bind", ""): "LSF binds tasks to CPUs with an affinity[] requirement; remove cpu_bind and add a "
                          "directive such as -R \"affinity[core(4)]\" (4 cores per task)",
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

    def directives(self, job: "ResolvedJob") -> List[str]:
        place, log = job.placement, job.work.log_path
        slots = place.slots_per_node
        options = [*([f"-q {place.queue}"] if place.queue else []), f"-J {job.job_name}",
                   *([f"-P {place.account}"] if place.account else []), f"-n {place.nodes * slots}",
                   *gpu_option(place), *([f'-R "select[{place.constraint}]"'] if place.constraint else []),
                   *(["-x"] if place.exclusive else []), *([f"-U {place.reservation}"] if place.reservation else []),
                   f"-W {place.time}",
                   *([] if place.mem_gb is None else [f'-R "rusage[mem={per_slot_gb(place.mem_gb, slots)}GB]"']),
                   '-R "span[hosts=1]"' if place.nodes == 1 else f'-R "span[ptile={slots}]"']
        if job.notify.wanted:
            options += ["-B", "-N", *([f"-u {job.notify.email}"] if job.notify.email else [])]
        # -r: rerun on other hosts when an execution host fails (lsf_failures.py); the batch shell keeps the budget
        return options + [f"-o {log}", f"-e {log[:-len('.out')]}.err", "-wa USR1",  # log_name() ends in .out
                          f"-wt {self.warning_seconds(place.grace_s) // 60}", "-r", *place.directives]

    def owned_options(self, job: "ResolvedJob") -> List[str]:
        """directives()'s own options, by name, from the same typed values (test_job_pieces holds the two alike)."""
        place, notify = job.placement, job.notify
        sets = [("q", place.queue), ("J", True), ("P", place.account), ("n", True), ("gpu", place.gpus_per_node),
                ("R", place.constraint), ("x", place.exclusive), ("U", place.reservation), ("W", True),
                ("R", place.mem_gb is not None), ("R", True), ("B", notify.wanted), ("N", notify.wanted),
                ("u", notify.wanted and notify.email), ("o", True), ("e", True), ("wa", True), ("wt", True),
                ("r", True)]
        return [name for name, given in sets if given]

    def requeue_leaving_out(self, job: "ResolvedJob") -> str:
        return f"{self.leave_out_requeued(job)}; {self.requeue_command}"

    def leave_out_requeued(self, job: "ResolvedJob") -> str:
        """bmod -R replaces all of a job's resource requirements: its own -R strings again, the hosts of $ct_left_out
        left out in its select[] (with the profile's constraint where it has one); a running job's apply at its
        next dispatch, after brequeue or LSF's own rerun."""
        constraint = job.placement.constraint
        own = [option for option in self.directives(job) if option.startswith("-R ")
               and not (constraint and option == f'-R "select[{constraint}]"')]
        select = f'-R "select[{f"({constraint}) && " if constraint else ""}$ct_hosts]"'
        return (f'{{ ct_hosts=$(printf "hname!=%s && " $ct_left_out); ct_hosts=${{ct_hosts% && }}; '
                f'bmod {" ".join(own)} {select} {self.this_job} || echo "[cluster-train] warning: bmod refused to leave '
                f'$ct_left_out out; requeued on any host" >&2; }}')

    def array_directives(self, name: str, count: int, cap: int, logs: str) -> Tuple[str, ...]:
        # LSF's job array: -J "name[1-N]%K" runs at most K elements at once; %J and %I name each element's output
        return (f'#BSUB -J "{name}[1-{count}]%{cap}"', f"#BSUB -o {logs}/array_%J_%I.out",
                f"#BSUB -e {logs}/array_%J_%I.err")

    def array_limit(self) -> Optional[int]:
        return 1000  # lsb.params MAX_JOB_ARRAY_SIZE, LSF's documented default

    def element_id(self, array_id: str, index: int) -> str:
        return f"{array_id}[{index + 1}]"

    def log_name(self, job_name: str) -> str:
        return f"{job_name}_%J.out"

    def inventory(self) -> Optional[Inventory]:
        return live_inventory()

    def time_seconds(self, text: str) -> Optional[int]:
        """bsub -W [hour:]minute[/host_name | /host_model]: minutes alone may pass 59 (210 is 3:30), after hours
        they run to 59; a host's name normalizes the limit to that host's CPU factor: seconds on such a host."""
        found = RUN_LIMIT.match(text)
        if not found or (found.group(1) is not None and int(found.group(2)) > 59):
            return None
        return (int(found.group(1) or 0) * 60 + int(found.group(2))) * 60

    def warning_seconds(self, grace_s: int) -> int:
        return (grace_s + 59) // 60 * 60  # -wt takes whole minutes: grace_s rounded up

    def wait_options(self, job_ids: Sequence[str]) -> Optional[List[str]]:
        # -w done(ID): dispatched once each is DONE; -ti: ended as an orphan (TERM_ORPHAN_SYSTEM) as soon as one
        # exits otherwise, whatever the cluster's ORPHAN_JOB_TERM_GRACE_PERIOD, rather than pend forever
        return ["-w", " && ".join(f"done({job_id})" for job_id in job_ids), "-ti"]

    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        # `bsub < script`: only then does bsub read the #BSUB lines of the script.
        with script.open() as stdin:
            try:
                done = subprocess.run(["bsub", *(self.wait_options(after) if after else [])], stdin=stdin,
                                      capture_output=True, text=True)
            except FileNotFoundError:
                raise UserError("bsub is not on PATH: run this on the cluster's login node") from None
        found = re.search(r"Job <(\d+)> is submitted", done.stdout)
        if done.returncode != 0 or not found:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise UserError(f"bsub failed: {message[-1] if message else 'exit status ' + str(done.returncode)}")
        return found.group(1)

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        # esstart_time: the estimator's start time (LSB_ENABLE_ESTIMATION), "-" where it made none; the reason has
        # spaces, hence the delimiter
        done = subprocess.run(["bjobs", "-noheader", "-o", "stat exit_code exec_host esstart_time pend_reason "
                               "delimiter='|'", job_id], capture_output=True, text=True)
        fields = [field.strip() for field in done.stdout.strip().split("|")] if done.stdout.strip() else []
        if done.returncode != 0 or not fields:  # mbatchd forgets a finished job after CLEAN_PERIOD (lsb.params)
            return {"state": State.UNKNOWN, "gone": "is not found" in done.stderr}
        fields = [field if field != "-" else "" for field in fields + [""] * 5]
        state = State.of(fields[0], self.STATES)
        pending = state == State.PENDING
        return {"state": state, "exit_code": fields[1], "nodes": fields[2],
                "start": fields[3] if pending else "", "reason": fields[4] if pending else ""}

    accounting_name = "bhist"
    commands = ("bsub", "bjobs", "bkill", "bhist")
    version_command = ("lsid",)
    ping_command = ("bqueues", "-l")  # mbatchd's answer; while it is down LSF retries, so doctor times it out
    controller = "mbatchd"
    # bhist -l's events (IBM's wording), in the order they happen to a job: the last one found is its state
    EVENTS = ((r"Submitted from host", State.PENDING), (r"Starting \(Pid", State.RUNNING),
              (r"Pending: Job has been requeued", State.PENDING), (r"Done successfully", State.COMPLETED),
              (r"Exited with exit code|Exited by signal|Exited;", State.FAILED),
              (r"\bTERM_(OWNER|ORPHAN_SYSTEM)\b", State.CANCELLED), (r"\bTERM_RUNLIMIT\b", State.TIMEOUT))

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
        code = [exit_status(m.group(0)) for m in EXITED.finditer(text)]  # a signal N: 128 + N, as LSF reports it
        return {"state": state, "exit_code": str(code[-1]) if code else "", "nodes": "",
                "said": f"bhist: {said.strip()}" + (f", KILL requested by {by[-1]}" if by and state == State.CANCELLED
                                                     else "")}

    # how bhist says a run ended (its exit status, or the TERM_ reason after it), on `State`
    RUN_ENDS = {"DONE": "COMPLETED", "EXIT": "FAILED", "TERM_OWNER": "CANCELLED", "TERM_ORPHAN_SYSTEM": "CANCELLED",
                "TERM_RUNLIMIT": "TIMEOUT", "RUN": "RUNNING"}

    def allocations(self, job_id: str) -> Optional[List[Dict]]:
        found = bhist_runs(job_id)
        return None if found is None else [{**a, "state": State.of(a["state"], self.RUN_ENDS).value} for a in found]

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        """bkill; a job that ended since it was last seen ("Job has already finished", exit 255) needs no cancel."""
        try:
            run_or_refuse(["bkill", job_id], "bkill")
        except UserError as err:
            if "Job has already finished" not in str(err):
                raise


def gpu_option(place: "Placement") -> List[str]:
    """-gpu: each rank its own GPU (exclusive_process), of the partition's model where it asks by type (gmodel), with
    at least the memory the profile needs (gmem)."""
    if not place.gpus_per_node:
        return []
    model = f":gmodel={place.gpu_type}" if place.gpu_request == "typed" else ""
    memory = f":gmem={place.gpu_mem_gb}G" if place.gpu_mem_gb else ""
    return [f'-gpu "num={place.gpus_per_node}:mode=exclusive_process{model}{memory}"']


def per_slot_gb(node_gb: int, slots: int) -> str:
    """rusage[mem] reserves per slot: a node's memory shared by its slots, to 0.1 GB, as 4 rather than 4.0."""
    return str(round(node_gb / slots, 1)).replace(".0", "")
