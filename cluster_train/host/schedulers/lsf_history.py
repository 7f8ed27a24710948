"""Each run of an LSF job as `bhist -l` tells it from LSF's event log (which outlives bjobs' memory): when it was
submitted or requeued, when it started (`Starting (Pid ...)`), when and how it ended (`Done successfully`, `Exited
with exit code N`, `Exited by signal N` for one a signal ended: bkill, TERM_RUNLIMIT, TERM_MEMLIMIT; then
`Completed <exit>; TERM_OWNER: ...`). LSF keeps no separate eligible time here: a job's wait counts
from its submission or its requeue. A run's queue waits are read from these, and an end its batch shell could not
record (cluster_train/host/runs/closing.py)."""
import datetime
import re
import subprocess
from typing import Dict, List, Optional

# bhist -l's event lines: "Wed Dec  2 00:06:19: ..." (with LSB_DISPLAY_YEAR=Y, "Wed Dec  2 00:06:19 2026: ...")
EVENT = re.compile(r"^\w{3} (\w{3} +\d+ \d\d:\d\d:\d\d)(?: (\d{4}))?: (.*)$", re.M)
# how a run's shell ended, in IBM's words (LSF 10.1, "Termination reasons displayed by bacct, bhist, and bjobs":
# "Exited by signal 2. The CPU time used is 0.1 seconds;" for a job bkill, a run limit or a memory limit ended)
EXITED = re.compile(r"Exited (with exit code|by signal) ?(\d+)")


def runs(job_id: str) -> Optional[List[Dict]]:
    """The job's runs in order, each {'submit', 'eligible', 'start', 'end' (epoch seconds; None: not yet), 'state'
    (DONE, EXIT, or the TERM_ reason it ended with), 'exit_code', 'said'}; None where bhist is not here or knows no
    such job."""
    try:
        done = subprocess.run(["bhist", "-l", job_id], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    if done.returncode != 0:
        return None
    found: List[Dict] = []
    queued = None  # when the job last entered the queue: its submission, a requeue
    for day, year, said in EVENT.findall(re.sub(r"\n {2,}", "", done.stdout)):  # bhist wraps, indenting the rest
        at = seconds(day, year)
        if said.startswith(("Submitted from host", "Pending: Job has been requeued")):
            queued = at
        elif said.startswith("Starting (Pid"):
            found.append({"submit": queued, "eligible": queued, "start": at, "end": None, "state": "RUN",
                          "exit_code": None, "said": ""})
        elif found and (said.startswith("Done successfully") or EXITED.match(said)):
            code = exit_status(said)
            found[-1].update(end=at, state="DONE" if code is None else "EXIT", exit_code=code or 0,
                             said=f"bhist: {said.split('.')[0]}")
        elif found and said.startswith("Completed <exit>; TERM_"):  # its end too, where no exit line came first
            reason = said.split("; ", 1)[1].rstrip(";")
            found[-1].update(state=reason.split(":")[0], end=found[-1]["end"] or at,
                             said=f"{found[-1]['said']}; {reason}" if found[-1]["said"] else f"bhist: {reason}")
    return found


def exit_status(said: str) -> Optional[int]:
    """The shell's exit status in a bhist line that says how it exited, None in any other: a signal N as 128 + N, as
    LSF reports a signalled job's exit code ("LSF adds 128 to system values", LSF job exit codes)."""
    found = EXITED.search(said)
    if found is None:
        return None
    return int(found.group(2)) + (128 if found.group(1) == "by signal" else 0)


def seconds(day: str, year: str) -> Optional[float]:
    """bhist's 'Dec  2 00:06:19' as epoch seconds, local time; without a year, the latest such time not in the
    future (a job of last December, read in January)."""
    now = datetime.datetime.now()
    try:
        when = datetime.datetime.strptime(f"{int(year or now.year)} {' '.join(day.split())}", "%Y %b %d %H:%M:%S")
    except ValueError:
        return None
    if not year and when > now + datetime.timedelta(days=1):
        when = when.replace(year=when.year - 1)
    return when.timestamp()
