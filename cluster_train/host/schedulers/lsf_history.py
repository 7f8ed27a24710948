"""Each run of an LSF job as `bhist -l` tells it from LSF's event log (which outlives bjobs' memory): when it was
submitted or requeued, when it started (`Starting (Pid ...)`), when and how it ended (`Done successfully`, `Exited
with exit code N`, `Completed <exit>; TERM_OWNER: ...`). LSF keeps no separate eligible time here: a job's wait counts
from its submission or its requeue. A run's queue waits are read from these, and an end its batch shell could not
record (cluster_train/host/runs/closing.py)."""
import datetime
import re
import subprocess
from typing import Dict, List, Optional

# bhist -l's event lines: "Wed Dec  2 00:06:19: ..." (with LSB_DISPLAY_YEAR=Y, "Wed Dec  2 00:06:19 2026: ...")
EVENT = re.compile(r"^\w{3} (\w{3} +\d+ \d\d:\d\d:\d\d)(?: (\d{4}))?: (.*)$", re.M)


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
        elif found and said.startswith(("Done successfully", "Exited with exit code")):
            code = re.match(r"Exited with exit code (\d+)", said)
            found[-1].update(end=at, state="EXIT" if code else "DONE", exit_code=int(code.group(1)) if code else 0,
                             said=f"bhist: {said.split('.')[0]}")
        elif found and said.startswith("Completed <exit>; TERM_"):
            reason = said.split("; ", 1)[1].rstrip(";")
            found[-1].update(state=reason.split(":")[0], said=f"{found[-1]['said']}; {reason}")
    return found


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
