"""Interactive allocations (`run-cluster shell`): how a scheduler asks for an allocation of a job's shape that only a
person uses, and how a command enters it on its first node with that person's terminal attached.

Slurm: a batch job that only sleeps holds the allocation (queued without waiting, so that its pending reason and start
estimate can be shown and Ctrl-C withdraws it), and `srun --jobid --overlap` enters it from the login node; the caller
cancels it when the command ends. LSF: `bsub -Is` asks for the allocation and runs the command in it, attached."""
import shlex
import subprocess
from pathlib import Path
from typing import List

from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.schedulers.base import Scheduler

# the holder's body: the time-limit warning is a batch job's cue to save; a session simply ends at the limit
HOLDER = """# cluster-train: an interactive session's allocation; run-cluster shell enters it (srun --overlap)
trap '' USR1
exec sleep infinity
"""


class Session:
    holds = True  # hold() queues the allocation and enter() steps into it; False: enter() asks for it itself

    def hold(self, scheduler: "Scheduler", job: "ResolvedJob", run_dir: Path) -> str:
        """Queue an allocation of the job's shape, without waiting for it; its job id."""
        raise NotImplementedError

    def enter(self, scheduler: "Scheduler", job: "ResolvedJob", job_id: str, command: List[str], tty: bool) -> List[str]:
        """The login node's command line that runs `command` on the allocation's first node (with a pseudo-terminal
        where `tty`), and returns its exit status."""
        raise NotImplementedError

    def job_id(self, job: "ResolvedJob") -> str:
        """The job id of a session enter() asked for itself (holds False), once it has ended; "" where not found."""
        return ""


class SlurmSession(Session):
    def hold(self, scheduler: "Scheduler", job: "ResolvedJob", run_dir: Path) -> str:
        script = run_dir / "allocation.sh"
        header = "".join(f"{scheduler.directive_prefix} {option}\n" for option in scheduler.directives(job))
        script.write_text(f"#!/bin/bash\n{header}{HOLDER}")
        return scheduler.submit(script, run_dir)

    def enter(self, scheduler: "Scheduler", job: "ResolvedJob", job_id: str, command: List[str], tty: bool) -> List[str]:
        # --overlap: the step shares the CPUs and memory the holder's batch step has; it gets the job's GPUs (GRES)
        return ["srun", f"--jobid={job_id}", "--overlap", *(["--pty"] if tty else []), "--nodes=1", "--ntasks=1",
                *command]


class LsfSession(Session):
    holds = False
    # a batch job's output files, time-limit warning, mail and rerun: with -I, -o and -e would take the terminal's
    # output, and -r has no place there (LSF: "Interactive jobs (bsub -I) are not rerunnable")
    BATCH_ONLY = ("o", "e", "oo", "eo", "wa", "wt", "B", "N", "u", "r")

    def enter(self, scheduler: "Scheduler", job: "ResolvedJob", job_id: str, command: List[str], tty: bool) -> List[str]:
        # named by its run id, unique, so that its job id is found afterwards (bsub -I prints it to the terminal)
        options = [word for directive in scheduler.directives(job)
                   if scheduler.option(directive) not in self.BATCH_ONLY + ("J",) for word in shlex.split(directive)]
        return ["bsub", "-Is" if tty else "-I", "-J", job.run_id, *options, *command]

    def job_id(self, job: "ResolvedJob") -> str:
        done = subprocess.run(["bjobs", "-a", "-noheader", "-J", job.run_id, "-o", "jobid"], capture_output=True,
                              text=True)
        found = done.stdout.split()
        return found[-1] if done.returncode == 0 and found and found[-1].isdigit() else ""
