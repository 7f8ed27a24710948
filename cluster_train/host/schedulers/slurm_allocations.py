"""Each allocation of a Slurm job as its accounting keeps it (`sacct --duplicates`: a requeued job's every allocation,
not only its last): when it was submitted or requeued (Submit), when Slurm let it start (Eligible: after its
dependencies, its begin time, a requeue's hold), when it started and ended, its state, and the batch step's exit (a
batch shell SIGKILLed after KillWait: `21.batch CANCELLED 0:9`). A run's queue waits are read from these, and an end
its batch shell could not record (cluster_train/host/runs/closing.py)."""
import datetime
import subprocess
from typing import Dict, List, Optional

from cluster_train.host.schedulers.base import State

FIELDS = "JobID,State,ExitCode,Submit,Eligible,Start,End"


def allocations(job_id: str, states: Dict[str, str]) -> Optional[List[Dict]]:
    """The job's allocations in order, as Scheduler.allocations() says them (`states`: Slurm's words that name
    another State); None where sacct is not here or does not answer."""
    try:
        done = subprocess.run(["sacct", "-j", job_id, "--duplicates", "-n", "-P", "-o", FIELDS],
                              capture_output=True, text=True)
    except FileNotFoundError:
        return None
    if done.returncode != 0:
        return None
    found: List[Dict] = []
    for line in done.stdout.splitlines():
        fields = line.split("|")
        if len(fields) != 7:
            continue
        listed, said, exit_code = fields[:3]
        if "." not in listed:  # the allocation's own line; its steps (.batch, .0) follow it
            found.append({**dict(zip(("submit", "eligible", "start", "end"), map(seconds, fields[3:]))),
                          "state": State.of(said.split(" ")[0], states).value, "exit_code": exit_status(exit_code),
                          "said": f"sacct: {listed} {said} {exit_code}"})
        elif found and listed.endswith(".batch"):  # the batch shell's own end: how it exited, and when
            # its End alone, Unknown (None) until slurmdbd has it: the allocation's end may come first, and a
            # segment closed from it would have two ends once the batch shell's own record follows
            found[-1].update(exit_code=exit_status(exit_code), said=f"sacct: {listed} {said} {exit_code}",
                             end=seconds(fields[6]))
    return found


def seconds(text: str) -> Optional[float]:
    """sacct's time (2026-12-02T00:02:46, local time, no zone) as epoch seconds; None for Unknown or None."""
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def exit_status(text: str) -> Optional[int]:
    """sacct's EXIT:SIGNAL as a shell's exit status: 0:9 (killed by SIGKILL) is 137, 3:0 is 3."""
    code, _, signal = text.partition(":")
    if not (code.isdigit() and signal.isdigit()):
        return None
    return 128 + int(signal) if int(signal) else int(code)
