"""An execution host of the LSF stand-in of the tests (see standin.py) failing under a running job, as IBM's LSF
documents what follows (site_commands.py's `bhosts` shows the host's status).

The failure itself is a test's trigger, no LSF command (`badmin hclose` closes a host to new jobs; it fails nothing):
`standin.py --host-down HOST` is the host crashing, `standin.py --host-up HOST` its coming back. Once down:
- bhosts shows it `unavail` ("Host is down, or LIM and sbatchd are unreachable": LSF 10.1, Host status);
- the job's tasks on it are lost: its processes in that host's namespace are killed;
- LSF shuts down the whole blaunch job, the connection to a task's RES being lost ("By default, LSF shuts down the
  entire job if connection is lost with the task RES": Using Platform LSF HPC, blaunch framework): the supervisor
  terminates it as LSF's default TERMINATE action does (SIGINT, SIGTERM, SIGKILL after JOB_TERMINATE_INTERVAL);
- a rerunnable job (`bsub -r`) is requeued with the same id and rerun on available hosts, "as if it were submitted
  new" (LSB_RESTART=Y); any other is lost, EXIT ("When a host becomes unavailable, all jobs that are running on that
  host are either requeued or lost, depending on whether the job was marked as rerunnable": LSF 10.1, Fault
  tolerance; bsub -r).
Not modelled: a job's first execution host failing (LSF shows the job UNKNWN, its batch script gone with the host):
the trigger refuses it.
"""
import os
import signal
from pathlib import Path

from bsub_options import refuse
from records import STATE, event, read, write

HOSTS_DIR = STATE / "hosts"  # one file per host that is not ok: its bhosts status


def status(host: str) -> str:
    return read(HOSTS_DIR, host, "ok")


def unavailable(hosts) -> list:
    return [host for host in dict.fromkeys(hosts) if status(host) != "ok"]


def host_down(host: str) -> None:
    namespace = Path(f"/run/netns/{host}")
    if not namespace.exists():
        refuse(f"stand-in: {host} is no test host (no {namespace}): its failure cannot be modelled")
    running = [job for job in STATE.glob("[0-9]*") if read(job, "stat") == "RUN" and (job / "pid").exists()
               and host in read(job, "hostfile").split()]
    if any(read(job, "hostfile").split()[0] == host for job in running):
        refuse(f"stand-in: {host} is the first execution host of a running job: not modelled (LSF: UNKNWN)")
    HOSTS_DIR.mkdir(parents=True, exist_ok=True)
    write(HOSTS_DIR, host, "unavail")
    for job in running:  # the request first: the supervisor must know why the job's tasks end
        write(job, "host_failed", host)
        event(job, "host_unavail", host=host)
        kill_tasks_on(int(read(job, "pid")), os.stat(namespace).st_ino)


def host_up(host: str) -> None:
    (HOSTS_DIR / host).unlink(missing_ok=True)


def kill_tasks_on(pgid: int, namespace: int) -> None:
    """SIGKILL the processes of the job's process group that run in the host's network namespace: what the host's
    crash takes with it (only the job's: the test cluster's own daemons share the namespace)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            group = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
            if group == pgid and os.stat(proc / "ns" / "net").st_ino == namespace:
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
