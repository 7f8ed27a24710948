"""What every scheduler adapter (cluster_train/host/schedulers/<name>.py) states and does: `Scheduler`, the contract
each adapter fills in with its scheduler's facts, commands and job-script template, in the one vocabulary of job states
cluster_train/host/scheduling/facts.py holds."""
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.schedulers.inventory import Inventory, LivePartition  # noqa: F401 (the adapters' words)
# the facts, below the adapters, re-exported: an adapter names the states it maps its scheduler's words onto
from cluster_train.host.scheduling.facts import (  # noqa: F401
    BUILT_IN, FINISHED, MODULE_NAME, NOT_STARTED, SAFE_NAME, State)
from cluster_train.host.scheduling.job import ResolvedJob


SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")  # [D-]N[:N[:N]], read by time_seconds


def run_or_refuse(cmd, what: str) -> str:
    """The command's output; its last line of complaint, as a UserError, when it fails."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise UserError(f"{cmd[0]} is not on PATH: run this on the cluster's login node") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"{what} failed: {message[-1] if message else 'exit status ' + str(done.returncode)}")
    return done.stdout


class Scheduler:
    """The contract of a scheduler adapter: the facts every adapter states, the commands each implements.

    A new scheduler: a module with a subclass of this class, its template in `templates/` beside it, its instance in
    `SCHEDULERS` (__init__.py; or site.py finds it). Nothing else in host/ names a scheduler: it asks the adapter.

    Must fill in:
      name             the cluster file's `scheduler:` word.
      template         its job script's Jinja file in `template_dir()` (the `templates/` folder beside the module);
                       it renders `job` (scheduling/job.py: job.work, job.placement...) and `scheduler` (this adapter),
                       may include the shared partials (_preamble.sh.j2, _segments.sh.j2...) of schedulers/templates/,
                       and decides nothing (its `{% if %}` tests one finished value).
      default_launch, launches   the launch shapes it can start (scheduling/launches.py: how each starts its ranks;
                       preflight refuses a profile asking for another).
      submit()         queue the rendered script (after=: held until those jobs COMPLETED); returns the job id.
      state()          what the scheduler says of a job it still knows ({'state': State, ...}; 'gone' once forgotten).
      cancel()         end the job.
      log_name()       the job's log file name in the run's logs/ (the scheduler's own % patterns).
    May fill in (the defaults describe a scheduler without arrays, accounting, requeue or directives):
      accounting(), accounting_name  the record of ended jobs that outlives state() (sacct, bhist); None: none.
      allocations()    each allocation of a job as the accounting keeps it: queued, eligible, start, end, state,
                       exit (queue waits; the end of a segment whose batch shell was killed); None: none.
      usage(), gpu_hour_limits()  what jobs held (runs/cost.py, a budget's use) and the site's GPU-hour limits.
      array_directives(), element_id(), array_index, array_log, array_replaces, array_cap(), cancel_array()
                       job arrays for sweeps; without them `--sweep` is refused.
      wait_options()   submit options holding a job until others COMPLETED (--after); None: --after is refused.
      array_limit(), after_directive()   most elements per array; how an array waits for the one before.
      array_states(), array_accounting()  a whole array's states in one question; else per element.
      requeue_command, requeue_leaving_out()
                       how the batch shell puts its own job back in the queue ("": a time-limited run just ends), and
                       how with the nodes of $ct_left_out left out of its next allocation ("": it cannot).
      requeued_under_us, failed_nodes, leave_out_pending, cancel_self
                       a shell test: the scheduler itself has requeued the job while this batch shell runs (a node
                       failure), so its steps were ended, whatever their exit status ("": it never does); then the
                       words that print its failed nodes (HOST<tab>WHY lines), leave $ct_left_out out (where that
                       depends on the job: leave_out_requeued()), cancel it (the budget is spent).
      died_rank        shell words printing "RANK HOST [EXIT]" of the rank whose death ended the training step
                       (EXIT: its own exit code, where it exited rather than being killed by a signal), where the
                       scheduler's launcher names it ("": the batch shell starts the ranks itself, and knows).
      rank_saved       a shell test: a rank of the step exited with the requeue code, and the launcher ended the
                       others after it ("": the batch shell's own wait sees every rank's exit).
      unsupported      the profile/partition keys (Placement fields) it cannot express, each with the fix.
      directives(), directive_prefix   its header's options, decided in Python (the template writes them).
      owned_options(), short_options, option_groups, repeatable, option_keys
                       the options its header sets from typed keys, and how it reads the profile's raw directives,
                       for preflight's check that no raw one repeats another.
      time_seconds(), time_example, default_time, max_warning_s, warning_seconds()
                       its time limits: read into seconds, bounds on the time-limit warning.
      cpu_bind_problem()   whether a profile's cpu_bind is a binding it understands.
      each_node        how the batch shell runs a command once on every node of its job (staging a data image).
      inventory()      what the live scheduler says it has (partitions, your accounts and QOS): init-cluster's draft
                       and check-cluster's drift; None where it cannot say.
      commands, version_command, ping_command, associations()
                       what `run-cluster doctor` looks for and asks on a login node: the commands a user of this
                       scheduler needs there, its version, whether its controller answers, your accounts and QOS.
      session          an interactive allocation and how a command enters it (sessions.py); None: `shell` refused.
      cluster_here()   which cluster this machine's scheduler serves: only a cluster file of that cluster asks it.
      title, partition_word, job_id_var, hosts_var, constraint_join, follow_by_default, test_script(),
      start_estimate(): the rest, each documented where it is declared below.
    """

    name: str
    title = ""  # its name in prose (Slurm, LSF)
    template: str  # the job script's Jinja file in template_dir()
    partition_word = "partition"  # what the cluster file's `partitions:` are called in this scheduler's manuals
    default_launch: str
    launches: Tuple[str, ...]  # launch shapes this scheduler can start
    time_example = "04:00:00 or 1-12:00:00"  # a time limit as time_seconds() reads it, for messages
    default_time = "01:00:00"  # one hour, a profile's time limit where it gives none
    max_warning_s: Optional[int] = None  # the longest time-limit warning (grace_s) it can give; None: no bound
    follow_by_default = False  # --wait unless --no-wait
    session = None  # interactive allocations (run-cluster shell): a sessions.Session (it imports this module)
    requeue_command = requeued_under_us = failed_nodes = leave_out_pending = cancel_self = ""  # the docstring above
    died_rank = rank_saved = ""  # the docstring above
    job_id_var = "$$"  # the job's id, as the batch shell reads it
    hosts_var = "$(hostname)"  # the job's hosts, as the batch shell reads them
    each_node = '"$@"'  # the body of ct_each_node COMMAND...: here, the batch shell's host is the job's only one
    directive_prefix = ""  # how a script line hands an option to the scheduler ("": no directives)
    constraint_join = "&"  # how two node-feature expressions are both required
    commands: Tuple[str, ...] = ()  # what a user of it needs on a login node; `doctor` looks for each on PATH
    version_command: Tuple[str, ...] = ()  # prints the scheduler's version (`doctor`); (): nothing to ask
    ping_command: Tuple[str, ...] = ()  # exits 0 only when the controller answers (`doctor`); (): nothing to ask
    controller = ""  # the daemon ping_command asks, in messages (slurmctld)
    unsupported: Dict[Tuple[str, str], str] = {}  # profile and partition settings it cannot express: key -> the fix
    short_options: Dict[str, str] = {}  # -p -> partition
    option_groups: Tuple[frozenset, ...] = ()  # options setting one thing in other words (--mem, --mem-per-gpu)
    repeatable: Tuple[str, ...] = ()  # options a script may give more than once
    option_keys: Dict[str, str] = {}  # a rendered option -> the cluster-file key that sets it

    def directives(self, job: "ResolvedJob") -> List[str]:
        """The header's options (`directive_prefix OPTION` lines), the profile's raw ones last; default: only those."""
        return list(job.placement.directives)

    def owned_options(self, job: "ResolvedJob") -> List[str]:
        """The options directives() sets from the job's typed values (not its raw ones), once each time it sets them,
        named in option()'s one spelling: preflight finds a raw directive repeating one without reading any text the
        adapter wrote. An adapter whose directives() sets options names them here too; default: none."""
        return []

    def requeue_leaving_out(self, job: "ResolvedJob") -> str:
        return ""  # shell: requeue this job, the hosts of $ct_left_out (space-separated) left out ("": it cannot)

    def leave_out_requeued(self, job: "ResolvedJob") -> str:
        return self.leave_out_pending  # shell: leave $ct_left_out out of the job the scheduler requeued itself

    def template_dir(self) -> Path:
        """The folder of this adapter's template: `templates/` beside the module that defines its class."""
        return Path(sys.modules[type(self).__module__].__file__).resolve().parent / "templates"

    def time_seconds(self, text: str) -> Optional[int]:
        """A time limit in this scheduler's own format as seconds; 0 for "no limit"; None where it is malformed.
        The default reads sbatch --time, every form Slurm takes: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and 0, -1,
        INFINITE, UNLIMITED. The first field has any size (90 minutes is "90"); the ones after it are clock fields
        (minutes and seconds to 59, hours after a day to 23): Slurm would add up 99:99:99, a typo, not a time."""
        if text.upper() in ("-1", "INFINITE", "UNLIMITED"):
            return 0
        found = SLURM_TIME.match(text)
        if not found:
            return None
        days, first, *rest = found.groups()
        numbers = [int(first)] + [int(n) for n in rest if n is not None]
        if days is not None:  # D-H, D-H:M, D-H:M:S
            hours, minutes, seconds = (numbers + [0, 0])[:3]
            if hours > 23 or minutes > 59 or seconds > 59:
                return None
            return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
        if any(number > 59 for number in numbers[1:]):
            return None
        if len(numbers) == 3:  # H:M:S
            return (numbers[0] * 60 + numbers[1]) * 60 + numbers[2]
        return numbers[0] * 60 + (numbers[1] if len(numbers) == 2 else 0)  # M or M:S

    def warning_seconds(self, grace_s: int) -> int:
        """How long before the limit the warning comes, as the script renders grace_s (LSF: whole minutes)."""
        return grace_s

    def cpu_bind_problem(self, value: str) -> str:
        """What is wrong with a profile's cpu_bind for this scheduler ("": nothing); one that cannot bind CPUs at
        all lists cpu_bind in `unsupported` instead, with the fix."""
        return f"cpu_bind {value!r} is not a binding {self.name} understands"

    def option(self, directive: str) -> str:
        """The option a profile's raw directive (free text) sets, in one spelling: '-p gpu', '--partition=gpu' ->
        'partition'."""
        word = directive.split()[0].split("=")[0] if directive.split() else ""
        if word.startswith("--"):
            return self.canonical(word[2:])
        return self.canonical(self.short_options.get(word[:2], word.lstrip("-")))

    def canonical(self, name: str) -> str:
        """An option's long name in one spelling: the options of a group setting one thing are one ('mem' ->
        'mem/mem-per-cpu/mem-per-gpu')."""
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
        raise NotImplementedError  # the id of the array's element `index` (0-based), as its commands take it

    def after_directive(self, job_id: str) -> Optional[str]:
        """The script line holding a job until `job_id` has ended, however (a split sweep's next array); None: it
        cannot chain jobs here, so a sweep over the array limit is refused."""
        return None

    def array_limit(self) -> Optional[int]:
        return None  # the most elements one array may hold (None: no limit), as its controller says

    def array_cap(self, cpus_per_run: int) -> int:
        return 4  # how many elements of a sweep run at once unless --max-parallel says: a cluster's queue takes a few

    def array_states(self, array_id: str) -> Optional[Dict[str, Dict[str, str]]]:
        """Every element's state() from one question to the scheduler (element id -> state; {}: it has forgotten the
        array); None: ask per element (a sweep's status then costs one command per element)."""
        return None

    def array_accounting(self, array_id: str) -> Optional[Dict[str, Dict[str, str]]]:
        return None  # every element's accounting() from one question; None: ask per element

    def cancel_array(self, array_id: str, sweep_dir: Path, run_dirs) -> None:
        self.cancel(array_id, sweep_dir)  # the scheduler ends every element

    def log_name(self, job_name: str) -> str:
        raise NotImplementedError

    def inventory(self) -> Optional["Inventory"]:
        """The live cluster's partitions, your accounts and QOS (init-cluster, check-cluster); None: not known here."""
        return None

    def cluster_here(self) -> Optional[str]:
        """The name this machine's scheduler gives the cluster it serves (a cluster file's scheduler_cluster, else its
        name, must be it for test_script(), start_estimate(), inventory() and array_limit() to be asked); None: it
        cannot say, and is asked for every cluster file of its kind."""
        return None

    def test_script(self, script: Path) -> Optional[Tuple[bool, str]]:
        """The scheduler's verdict on a script's directives, nothing queued; None: no such check, or no scheduler."""
        return None

    def start_estimate(self, script: Path) -> str:  # a dry run's line: when it would start, asked without queuing
        return f"start: {self.title} gives no start estimate before a job is queued (once pending, `status` shows it)"

    def wait_options(self, job_ids: Sequence[str]) -> Optional[List[str]]:
        """Submit options (not script lines) holding the job until all `job_ids` COMPLETED; None: it cannot."""
        return None

    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        raise NotImplementedError

    def state(self, job_id: str, run_dir: Optional[Path] = None) -> Dict[str, str]:
        """What the scheduler says of the job while it still knows it: {'state': State, ...}; UNKNOWN with
        'gone' when it answers that it has no such job (it forgets ended jobs, never queued or running ones)."""
        raise NotImplementedError

    accounting_name = ""  # the command that remembers ended jobs ("": this scheduler keeps no accounting)

    def accounting(self, job_id: str) -> Optional[Dict[str, str]]:
        """The accounting's record of the job, which outlives the scheduler's memory: {'state': State,
        'exit_code', 'nodes', 'said' (its own words, with who ended the job where it says)}; None if it has none."""
        return None

    def allocations(self, job_id: str) -> Optional[List[Dict[str, Any]]]:
        """The job's allocations in order (a requeued job has several), each {'submit' (queued: submitted or
        requeued), 'eligible' (free to start: after its dependencies, a begin time, a requeue's hold), 'start',
        'end' (epoch seconds; None: not yet or not known), 'state' (a State's value), 'exit_code' (the batch
        shell's, a signal as 128 + its number; None: not known), 'said' (the accounting's own words)}; None where
        the scheduler keeps no such record."""
        return None

    def usage(self, job_id: str = "", since: str = "", account: str = "") -> Optional[List[Dict[str, float]]]:
        return None  # each allocation's gpu_s, cpu_s, cpu_used_s, energy_j: the job's, else yours since; None: none

    def gpu_hour_limits(self) -> Dict[str, float]:
        return {}  # account -> the GPU-hours the site lets it use, where the scheduler states it

    def associations(self) -> Optional[Dict[str, Tuple[str, ...]]]:
        """The accounts this user may charge, each with its QOS (`doctor`); None: no such record, or not asked."""
        return None

    def cancel(self, job_id: str, run_dir: Optional[Path] = None) -> None:
        raise NotImplementedError
