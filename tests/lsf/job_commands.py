"""bjobs, bkill, brequeue, bmod and bhist of the LSF stand-in of the tests (see standin.py): the commands on
submitted jobs.

They read the job records and leave requests (kill_request, requeue_request) that the job's supervisor acts on, as
LSF's commands leave them to sbatchd; only `bkill -s` signals a running job itself, and brequeue of a finished job
starts a new supervisor. bjobs -l and bhist -l print through the same print_long.
"""
import getpass
import json
import sys
import time
from pathlib import Path

from bsub_options import place, refuse, signal_number
from records import (STATE, elements, event, existing_job, forgotten, history, is_array, job_dir, read, sort_key,
                     write)
from supervisor import signal_job, start_supervisor

REASONS = {
    "TERM_RUNLIMIT": "job killed after reaching LSF run time limit",
    "TERM_REQUEUE_OWNER": "job killed and requeued by owner",
    "TERM_OWNER": "job killed by owner",
    "TERM_ORPHAN_SYSTEM": "orphan job automatically terminated by LSF",
}


def job_ids(argv, flags_with_value=()) -> tuple:
    """(flags, job ids) of a b* command line."""
    flags, ids, i = {}, [], 0
    while i < len(argv):
        if argv[i] in flags_with_value and i + 1 < len(argv):
            flags[argv[i]] = argv[i + 1]
            i += 1
        elif argv[i].startswith("-"):
            flags[argv[i]] = True
        else:
            ids.append(argv[i])
        i += 1
    return flags, ids


BJOBS_FIELDS = {
    "jobid": lambda job, rec: str(rec.get("array_id") or rec["id"]),  # an element shows its array's id
    "jobindex": lambda job, rec: str(rec.get("index", 0)),
    "stat": lambda job, rec: read(job, "stat", "UNKWN"),
    "exit_code": lambda job, rec: read(job, "exit_code", "-") if read(job, "stat") in ("DONE", "EXIT") else "-",
    "exec_host": lambda job, rec: ":".join(dict.fromkeys(rec["slots"])) if read(job, "stat") != "PEND" else "-",
    "job_name": lambda job, rec: rec["name"],
    "queue": lambda job, rec: rec["queue"],
    "user": lambda job, rec: rec["user"],
    "from_host": lambda job, rec: rec["submit_host"],
    "exit_reason": lambda job, rec: read(job, "exit_reason", "-") if read(job, "stat") in ("DONE", "EXIT") else "-",
    "run_limit": lambda job, rec: f"{rec['runlimit_s'] / rec['minute_s']:.1f}/0" if rec["runlimit_s"] else "-",
    # LSF's simulation-based estimate (LSB_ENABLE_ESTIMATION); the stand-in has no estimator: "-", as LSF shows none
    "esstart_time": lambda job, rec: "-",
    "pend_reason": lambda job, rec: pend_reason(job, rec) if read(job, "stat") == "PEND" else "-",
}
BJOBS_FIELDS["estimated_sim_start_time"] = BJOBS_FIELDS["esstart_time"]  # the field's full name; esstart_time: alias


def pend_reason(job, rec) -> str:
    """The single key pending reason (bjobs -p1), in LSF's words, for what holds a stand-in job."""
    if rec.get("waits_on"):
        return "Job dependency condition not satisfied"
    if rec.get("array_cap"):
        return "The job array has reached its job slot limit"
    return "New job is waiting for scheduling"



def bjobs(argv) -> None:
    flags, ids = job_ids(argv, ("-o", "-q", "-u", "-J"))
    if not ids:  # unfinished jobs; with -a also those finished within CLEAN_PERIOD
        ids = sorted((p.name for p in STATE.glob("[0-9]*") if not is_array(p) and not forgotten(p)
                      and ("-a" in flags or read(p, "stat") not in ("DONE", "EXIT"))), key=sort_key) \
            if STATE.is_dir() else []
        if "-J" in flags:  # -J job_name: only the jobs of that name
            ids = [i for i in ids if json.loads((job_dir(i) / "job.json").read_text()).get("name") == flags["-J"]]
        if not ids:
            print("No job found" if "-a" in flags else "No unfinished job found")
            return
    ids = [key for job_id in ids for key in elements(job_id)]
    status = 0
    if "-l" in flags:
        for job_id in ids:
            job = job_dir(job_id)
            if not (job / "job.json").exists() or forgotten(job):
                print(f"Job <{job_id}> is not found", file=sys.stderr)
                status = 255
                continue
            print_long(job, json.loads((job / "job.json").read_text()), bjobs_style=True)
        sys.exit(status)
    fields = str(flags.get("-o", "jobid user stat queue from_host exec_host job_name")).split()
    delimiter = next((f[len("delimiter="):].strip("'\"") for f in fields if f.startswith("delimiter=")), " ")
    fields = [f.split(":")[0].lower() for f in fields if not f.startswith("delimiter=")]
    unknown = [f for f in fields if f not in BJOBS_FIELDS]
    if unknown:
        refuse(f"{unknown[0]}: Illegal field.")
    if "-noheader" not in flags:
        print(" ".join(f.upper() for f in fields))
    for job_id in ids:
        job = job_dir(job_id)
        if not (job / "job.json").exists() or forgotten(job):
            print(f"Job <{job_id}> is not found", file=sys.stderr)
            status = 255
            continue
        rec = json.loads((job / "job.json").read_text())
        print(delimiter.join(BJOBS_FIELDS[f](job, rec) for f in fields))
    sys.exit(status)


def bkill(argv) -> None:
    flags, ids = job_ids(argv, ("-s",))
    named = ids
    ids = [key for job_id in ids for key in elements(job_id)]
    for job_id in ids:
        if len(ids) > len(named) and read(job_dir(job_id), "stat") in ("DONE", "EXIT"):
            continue  # bkill of an array: its unfinished elements
        job = existing_job(job_id, f"Job <{job_id}>: No matching job found")
        stat = read(job, "stat")
        if stat in ("DONE", "EXIT"):
            refuse(f"Job <{job_id}>: Job has already finished")
        if "-s" in flags:  # bkill -s SIGNAL: that signal only
            signum = signal_number(str(flags["-s"]))
            if stat != "RUN" or signum < 0:
                refuse(f"Job <{job_id}>: Job is not running" if signum >= 0 else f"{flags['-s']}: Bad signal")
            signal_job(job, int(read(job, "pid")), signum, "bkill -s")
            print(f"Job <{job_id}> is being signaled")
            continue
        event(job, "kill_request", user=getpass.getuser())  # first: the supervisor ends the job once it sees the file
        (job / "kill_request").write_text(getpass.getuser())
        print(f"Job <{job_id}> is being terminated")


def brequeue(argv) -> None:
    flags, ids = job_ids(argv, ("-J", "-u"))
    if "-H" in flags:
        refuse("stand-in: brequeue -H (requeue to PSUSP) is not implemented")
    if not ids:  # LSF: the most recently submitted job
        counter = STATE / "last_job_id"
        ids = [counter.read_text().strip()] if counter.exists() else []
        if not ids:
            refuse("No matching job found")
    states = set()
    for flag, stats in (("-r", {"RUN"}), ("-e", {"EXIT"}), ("-d", {"DONE"}), ("-p", {"PEND"}),
                        ("-a", {"RUN", "USUSP", "SSUSP", "EXIT", "DONE"})):
        if flag in flags:
            states |= stats
    states = states or {"RUN", "USUSP", "SSUSP"}
    status = 0
    for job_id in [key for job_id in ids for key in elements(job_id)]:
        job = existing_job(job_id, f"Job <{job_id}>: No matching job found")
        stat = read(job, "stat")
        if stat not in states:
            print(f"Job <{job_id}>: Job is not in a proper state for the requested operation ({stat})", file=sys.stderr)
            status = 255
            continue
        event(job, "requeue_request", user=getpass.getuser(), stat=stat)
        if stat == "RUN":
            (job / "requeue_request").write_text(getpass.getuser())  # the supervisor kills and requeues the run
        elif stat in ("DONE", "EXIT"):
            (job / "kill_request").unlink(missing_ok=True)
            write(job, "stat", "PEND")
            event(job, "requeued", why=f"brequeue of a {stat} job")
            start_supervisor(job_id)
        print(f"Job <{job_id}> is being requeued")
    sys.exit(status)


def bmod(argv) -> None:
    """bmod -R "res_req" [-R ...] ID: the job's resource requirements replaced (every -R it had, as LSF's bmod -R
    does); a running job's apply at its next dispatch, after a requeue (LSF with LSB_MOD_ALL_JOBS=Y)."""
    resources, ids = [], []
    words = iter(argv)
    for word in words:
        if word == "-R":
            resources.append(next(words, ""))
        elif word.startswith("-"):
            refuse(f"stand-in: bmod {word} is not implemented")
        else:
            ids.append(word)
    if len(ids) != 1 or not all(resources) or not resources:
        refuse('bmod: usage: bmod -R "res_req" [-R "res_req" ...] job_ID')
    job = existing_job(ids[0], f"Job <{ids[0]}>: No matching job found")
    if read(job, "stat") in ("DONE", "EXIT"):
        refuse(f"Job <{ids[0]}>: Job has already finished")
    rec = json.loads((job / "job.json").read_text())
    rec["next_slots"] = place({"-q": rec["queue"], "-n": str(len(rec["slots"])), "-R": resources})
    (job / "job.json").write_text(json.dumps(rec, indent=1))
    event(job, "modify", resources=resources)
    print(f"Parameters of job <{ids[0]}> are being changed")


# --- bhist ---------------------------------------------------------------------------------------------------------

def stamp(t: float) -> str:
    return time.strftime("%a %b %d %H:%M:%S", time.localtime(t))


def print_long(job: Path, rec: dict, bjobs_style: bool = False) -> None:
    """bhist -l (or bjobs -l) of one job: its submission, then every run and how it ended."""
    events = history(job)
    stat = read(job, "stat")
    head = f"Job <{rec['id']}>, Job Name <{rec['name']}>, User <{rec['user']}>, Project <default>"
    if bjobs_style:
        head += f", Status <{stat}>, Queue <{rec['queue']}>"
    print(f"{head}, Command <{rec['command']}>")
    extra = f", Output File <{rec['out']}>, Error File <{rec['err']}>"
    if rec["requeue_exit_values"]:
        extra += f", Re-queue Exit Values <{rec['requeue_exit_values']}>"
    if rec["warning_action"]:
        extra += f", Warning signal <{rec['warning_action']}>, Warning time <{rec['warning_time']}> min"
    lines, run_event = [], None  # the last of start, end and requeued: a kill of a pending job ends no run
    for e in events:
        t, kind = stamp(e["t"]), e["event"]
        if kind == "submit":
            lines.append(f"{t}: Submitted from host <{rec['submit_host']}>, to Queue <{rec['queue']}>, "
                         f"CWD <{rec['cwd']}>{extra};")
            if rec["runlimit_s"]:
                lines.append(f"\n RUNLIMIT\n {rec['runlimit_s'] / rec['minute_s']:.1f} min\n")
        elif kind == "start":
            hosts = e.get("slots", rec["slots"])  # each run's own: a rerun or a bmod -R may place it elsewhere
            where = " ".join(f"<{h}>" if hosts.count(h) == 1 else f"<{hosts.count(h)}*{h}>"
                             for h in dict.fromkeys(hosts))
            lines.append(f"{t}: Dispatched {len(hosts)} Task(s) on Host(s) {where}, Allocated {len(hosts)} Slot(s) "
                         f"on Host(s) {where};")
            lines.append(f"{t}: Starting (Pid {e['pid']});"
                         + (" Job restarted (LSB_RESTART=Y);" if e["restart"] else ""))
        elif kind == "signal":
            lines.append(f"{t}: Signal <{e['signal']}> sent to the job ({e['why']});")
        elif kind == "kill_request":
            lines.append(f"{t}: Signal <KILL> requested by user or administrator <{e['user']}>;")
        elif kind == "requeue_request":
            lines.append(f"{t}: Signal <REQUEUE_PEND> requested by user or administrator <{e['user']}>;")
        elif kind == "end":
            if e["stat"] == "DONE":
                lines.append(f"{t}: Done successfully. The CPU time used is 0.0 seconds;")
            elif e.get("signal"):  # a shell a signal ended (bkill, a run limit): its number, not 128 + it
                lines.append(f"{t}: Exited by signal {e['signal']}. The CPU time used is 0.0 seconds;")
            else:
                lines.append(f"{t}: Exited with exit code {e['code']}. The CPU time used is 0.0 seconds;")
            if e["reason"]:
                lines.append(f"{t}: Completed <exit>; {e['reason']}: {REASONS[e['reason']]};")
        elif kind == "requeued":
            lines.append(f"{t}: Pending: Job has been requeued ({e['why']});")
        elif kind == "finish" and e["stat"] == "EXIT" and run_event != "end":  # killed while pending, requeued too
            lines.append(f"{t}: Exited; {e['reason']}: {REASONS.get(e['reason'], '')};")
        run_event = kind if kind in ("start", "end", "requeued") else run_event
    print("\n".join(lines))
    if not bjobs_style:
        print(summary(events, stat))
    print("-" * 78)


def summary(events: list, stat: str) -> str:
    pend = run = 0.0
    last, state = None, "PEND"
    for e in events:
        if last is not None:
            if state == "PEND":
                pend += e["t"] - last
            elif state == "RUN":
                run += e["t"] - last
        last = e["t"]
        state = {"start": "RUN", "requeued": "PEND", "finish": "DONE"}.get(e["event"], state)
    end = time.time() if stat not in ("DONE", "EXIT") else last
    if last is not None and state in ("PEND", "RUN"):
        pend, run = (pend + end - last, run) if state == "PEND" else (pend, run + end - last)
    return (f"\nSummary of time in seconds spent in various states by  {stamp(end or time.time())}\n"
            f"  PEND     PSUSP    RUN      USUSP    SSUSP    UNKWN    TOTAL\n"
            f"  {pend:<9.0f}0        {run:<9.0f}0        0        0        {pend + run:<.0f}\n")


def bhist(argv) -> None:
    flags, ids = job_ids(argv, ("-n", "-u", "-J", "-q"))
    if not ids:
        ids = sorted((p.name for p in STATE.glob("[0-9]*") if (p / "job.json").exists() and not is_array(p)),
                     key=sort_key) if STATE.is_dir() else []
    ids = [key for job_id in ids for key in elements(job_id)]
    found = [job_dir(i) for i in ids if (job_dir(i) / "job.json").exists()]
    for i in ids:
        if not (job_dir(i) / "job.json").exists():
            print(f"{i}: No matching job found", file=sys.stderr)
    if not found:
        sys.exit(255)
    if "-l" in flags:
        for job in found:
            print_long(job, json.loads((job / "job.json").read_text()))
        return
    print("Summary of time in seconds spent in various states:")
    print("JOBID   USER    JOB_NAME  PEND    PSUSP   RUN     USUSP   SSUSP   UNKWN   TOTAL")
    for job in found:
        rec = json.loads((job / "job.json").read_text())
        numbers = summary(history(job), read(job, "stat")).split("\n")[-2].split()
        print(f"{rec['id']:<7} {rec['user'][:7]:<7} {rec['name'][:9]:<9} " + " ".join(f"{n:<7}" for n in numbers))
