#!/usr/bin/env python3
"""A stand-in for LSF's bsub, bjobs, bkill, brequeue, bhist and blaunch, for tests only (LSF has no free implementation).

It checks what real bsub checks before accepting a job (queue, -n, -W, -wa/-wt, -Q, -gpu and -R syntax; #BSUB lines
read from a script given on standard input), places the job on the queue's hosts, and runs the script on the first one
with the variables LSF sets (LSB_JOBID, LSB_DJOB_HOSTFILE with one line per slot, LSB_HOSTS, LSB_MCPU_HOSTS, %J in
-o/-e). Hosts are the test Slurm cluster's network namespaces (tests/slurm/cluster.sh): `blaunch -z HOST cmd` runs cmd
in HOST's namespace, as a remote task would; without them a job runs on this machine. Queues: tests/lsf/queues.json.

Long runs, as IBM's LSF 10.1 documents them (bsub -W/-wa/-wt/-Q, brequeue, bkill, bhist):
- a detached supervisor per job (`standin.py --supervise ID`, the part sbatchd plays) starts the batch script in its
  own process group, and signals that group: the warning action `-wa SIG` `-wt` minutes before the run limit `-W`;
  at the run limit SIGUSR2, then, if the job is still there after the grace period (LSF: ten minutes), SIGINT and
  SIGTERM and JOB_TERMINATE_INTERVAL later SIGKILL; the run ends EXIT with TERM_RUNLIMIT.
- `brequeue [-a|-d|-e|-r|-p] [ID]` kills a running job like bkill (SIGINT, SIGTERM, later SIGKILL) and requeues it; it
  returns at once, so a batch script may call it on itself and exit. A requeued job keeps its id, goes back to PEND,
  then runs its script again from the start with LSB_RESTART=Y and LSB_RESTART_PID. `bsub -Q "75"` (exit values, `all`,
  `~N`, `EXCLUDE(N)`) requeues a run that exits with one of them. `-o`/`-e` files are appended to across runs (`-oo`/
  `-eo` overwrite them at each start).
- `bhist -l ID` shows every run and how it ended (requeue, run limit, DONE/EXIT); records stay in the state dir.
Clock and intervals, for tests (seconds): CT_LSF_MINUTE_SECONDS (an LSF minute in -W/-wt; default 60),
CT_LSF_RUNLIMIT_GRACE (SIGUSR2 at the run limit to the kill; default 10 LSF minutes), CT_LSF_TERMINATE_INTERVAL
(SIGINT/SIGTERM to SIGKILL; default 10, LSF's JOB_TERMINATE_INTERVAL), CT_LSF_REQUEUE_DELAY (PEND time of a requeued
job before it is dispatched again; default 2). They are read at bsub time and kept with the job.
State: $CT_LSF_STATE (default /tmp/ct-lsf), one directory per job: job.json, env.json, script.sh, hostfile, stat,
exit_code, exit_reason, pid, history.jsonl (every event with its time).
"""
import getpass
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("CT_LSF_STATE", "/tmp/ct-lsf")).absolute()
QUEUES = json.loads((HERE / "queues.json").read_text())
GPU = re.compile(r"^num=\d+(:(mode=(shared|exclusive_process)|mps=(yes|no)|j_exclusive=(yes|no)|gmodel=[\w-]+|gmem=\d+[MG]?))*$")
RUNLIMIT = re.compile(r"^(\d+:)?\d+$")
RES_SECTION = re.compile(r"(select|order|rusage|span|same|cu|affinity)\[([^\]]*)\]")
RUSAGE = re.compile(r"^mem=\d+(\.\d+)?(KB|MB|GB|TB)?$")
SPAN = re.compile(r"^(hosts=1|ptile=\d+)$")
REQUEUE_VALUE = re.compile(r"^(all|~?\d+|EXCLUDE\(\d+( \d+)*\))$")
FLAGS_WITH_VALUE = {"-q", "-J", "-n", "-gpu", "-W", "-R", "-u", "-o", "-e", "-oo", "-eo", "-M", "-P", "-G",
                    "-wa", "-wt", "-Q"}
FLAGS = {"-B", "-N", "-x", "-I", "-r", "-rn"}
REASONS = {
    "TERM_RUNLIMIT": "job killed after reaching LSF run time limit",
    "TERM_REQUEUE_OWNER": "job killed and requeued by owner",
    "TERM_OWNER": "job killed by owner",
}
POLL_S = 0.05


def refuse(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(255)


def seconds(env_name: str, default: float) -> float:
    return float(os.environ.get(env_name, default))


def minutes(value: str) -> int:
    """[hour:]minute -> minutes."""
    hours, _, mins = value.rpartition(":")
    return int(hours or 0) * 60 + int(mins)


def signal_number(name: str) -> int:
    """-wa 'USR1' / 'SIGUSR1' / '10', as LSF takes signal names."""
    if name.isdigit():
        return int(name)
    try:
        return int(getattr(signal, name if name.startswith("SIG") else f"SIG{name}"))
    except AttributeError:
        return -1


def split_bsub(argv):
    """(option words, command words): bsub [options] [command [args]]."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in FLAGS_WITH_VALUE else 1
    return argv[:i], argv[i:]


def parse_bsub(argv, directives: str) -> dict:
    """#BSUB lines first, then the command line, as bsub does (the command line wins)."""
    words = []
    for line in directives.splitlines()[1:]:
        if line.startswith("#BSUB"):
            words += shlex.split(line[len("#BSUB"):])
        elif line.strip() and not line.startswith("#"):
            break  # bsub stops reading directives at the first command
    words += argv
    opts = {"-R": []}
    i = 0
    while i < len(words):
        flag = words[i]
        if flag in FLAGS:
            opts[flag] = True
        elif flag in FLAGS_WITH_VALUE and i + 1 < len(words):
            i += 1
            opts.setdefault(flag, []).append(words[i]) if flag == "-R" else opts.__setitem__(flag, words[i])
        else:
            refuse(f"bsub: illegal option -- {flag.lstrip('-')}. Job not submitted.")
        i += 1
    return opts


def requeue_tokens(spec: str) -> list:
    return re.findall(r"EXCLUDE\([^)]*\)|\S+", spec)


def check(opts: dict) -> None:
    queue = opts.get("-q", "normal")
    if queue not in QUEUES:
        refuse(f"{queue}: No such queue. Job not submitted.")
    if not re.fullmatch(r"[1-9]\d*", opts.get("-n", "1")):
        refuse(f"Bad argument for option -n: {opts['-n']}. Job not submitted.")
    if "-W" in opts and not RUNLIMIT.match(opts["-W"]):
        refuse(f"{opts['-W']}: Bad RUNLIMIT specification. Job not submitted.")
    if "-wt" in opts and not RUNLIMIT.match(opts["-wt"]):
        refuse(f"{opts['-wt']}: Bad job action warning time. Job not submitted.")
    if "-wa" in opts and signal_number(opts["-wa"]) not in {int(s) for s in signal.Signals}:
        refuse(f"{opts['-wa']}: Bad job warning action. Job not submitted.")
    if "-Q" in opts and not all(REQUEUE_VALUE.match(t) for t in requeue_tokens(opts["-Q"]) or [""]):
        refuse(f"{opts['-Q']}: Bad requeue exit value specification. Job not submitted.")
    if "-gpu" in opts and not GPU.match(opts["-gpu"]):
        refuse(f"Invalid GPU requirement: {opts['-gpu']}. Job not submitted.")
    for requirement in opts["-R"]:
        sections = RES_SECTION.findall(requirement)
        rest = RES_SECTION.sub("", requirement).strip()
        bad = rest or not sections
        for name, body in sections:
            parts = [p for p in re.split(r"[:,]", body) if p]
            bad |= name == "rusage" and not all(RUSAGE.match(p) for p in parts)
            bad |= name == "span" and not all(SPAN.match(p) for p in parts)
        if bad:
            refuse(f"{requirement}: Bad resource requirement syntax. Job not submitted.")


def requeues_on(spec: str, code: int) -> bool:
    """bsub -Q "[all [~N ...] | N ...] [EXCLUDE(N ...)]": is exit value `code` a requeue value?"""
    if code == 0:
        return False
    tokens = requeue_tokens(spec)
    values = set()
    for token in tokens:
        if token.startswith("EXCLUDE("):  # exclusive requeue (not on the same host again): host part not modelled
            values |= {int(v) for v in token[8:-1].split()}
        elif token.isdigit():
            values.add(int(token))
    if "all" in tokens:
        return f"~{code}" not in tokens
    return code in values


def place(opts: dict) -> list:
    """One host name per slot, as LSB_DJOB_HOSTFILE lists them."""
    queue = QUEUES[opts.get("-q", "normal")]
    slots = int(opts.get("-n", "1"))
    span = " ".join(opts["-R"])
    ptile = int(re.search(r"ptile=(\d+)", span).group(1)) if "ptile=" in span else slots if "hosts=1" in span else 1
    hosts = math.ceil(slots / ptile)
    if ptile > queue["slots_per_host"] or hosts > len(queue["hosts"]):
        refuse(f"stand-in: {slots} slots x ptile {ptile} cannot be placed on queue hosts {queue['hosts']} "
               f"({queue['slots_per_host']} slots each); real LSF would leave the job pending")
    return [queue["hosts"][i // ptile] for i in range(slots)]


# --- job records ---------------------------------------------------------------------------------------------------

def job_dir(job_id: str) -> Path:
    return STATE / job_id


def event(job: Path, kind: str, **fields) -> None:
    with (job / "history.jsonl").open("a") as f:
        f.write(json.dumps({"t": time.time(), "event": kind, **fields}) + "\n")


def history(job: Path) -> list:
    path = job / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def read(job: Path, name: str, default: str = "") -> str:
    try:
        return (job / name).read_text().strip()
    except FileNotFoundError:
        return default


def write(job: Path, name: str, text: str) -> None:
    tmp = job / f".{name}.tmp"
    tmp.write_text(f"{text}\n")
    tmp.rename(job / name)


def existing_job(job_id: str, message: str) -> Path:
    job = job_dir(job_id)
    if not job_id.isdigit() or not (job / "job.json").exists():
        refuse(message)
    return job


def start_supervisor(job_id: str) -> None:
    subprocess.Popen([sys.executable, str(HERE / "standin.py"), "--supervise", job_id], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                     env={**os.environ, "CT_LSF_STATE": str(STATE)})


# --- bsub ----------------------------------------------------------------------------------------------------------

def bsub(argv) -> None:
    words, command = split_bsub(argv)
    if command:  # `bsub [options] script`: the file runs as the job; bsub reads #BSUB lines only from stdin
        script, directives = Path(command[0]).read_text(), ""
    else:
        script = directives = sys.stdin.read()
    opts = parse_bsub(words, directives)
    check(opts)
    slots = place(opts)
    STATE.mkdir(parents=True, exist_ok=True)
    counter = STATE / "last_job_id"
    job_id = int(counter.read_text()) + 1 if counter.exists() else 1000
    counter.write_text(str(job_id))
    job = job_dir(str(job_id))
    job.mkdir()
    (job / "script.sh").write_text(script)
    (job / "hostfile").write_text("".join(f"{h}\n" for h in slots))
    out = opts.get("-o", opts.get("-oo", str(job / "stdout"))).replace("%J", str(job_id)).replace("%I", "0")
    err = opts.get("-e", opts.get("-eo", out)).replace("%J", str(job_id)).replace("%I", "0")
    hosts = list(dict.fromkeys(slots))
    gpus = int(re.match(r"num=(\d+)", opts["-gpu"]).group(1)) if "-gpu" in opts else 0
    minute_s = seconds("CT_LSF_MINUTE_SECONDS", 60)
    runlimit_s = minutes(opts["-W"]) * minute_s if "-W" in opts else None
    warn = "-wa" in opts and "-wt" in opts  # LSF: a warning action needs both
    record = {
        "id": job_id, "name": opts.get("-J", "job"), "queue": opts.get("-q", "normal"), "user": getpass.getuser(),
        "submit_host": os.uname().nodename, "cwd": os.getcwd(), "command": script.splitlines()[0] if script else "",
        "slots": slots, "out": out, "err": err, "out_mode": "w" if "-oo" in opts and "-o" not in opts else "a",
        "err_mode": "w" if "-eo" in opts and "-e" not in opts else "a",
        "runlimit": opts.get("-W"), "runlimit_s": runlimit_s,
        "warning_action": opts.get("-wa") if warn else None, "warning_time": opts.get("-wt") if warn else None,
        "warning_s": minutes(opts["-wt"]) * minute_s if warn else None, "requeue_exit_values": opts.get("-Q"),
        "minute_s": minute_s, "runlimit_grace_s": seconds("CT_LSF_RUNLIMIT_GRACE", 10 * minute_s),
        "terminate_interval_s": seconds("CT_LSF_TERMINATE_INTERVAL", 10),
        "requeue_delay_s": seconds("CT_LSF_REQUEUE_DELAY", 2),
    }
    env = {**os.environ, "LSB_JOBID": str(job_id), "LSB_JOBNAME": record["name"], "LSB_QUEUE": record["queue"],
           "LSB_DJOB_HOSTFILE": str(job / "hostfile"), "LSB_HOSTS": " ".join(slots),
           "LSB_MCPU_HOSTS": " ".join(f"{h} {slots.count(h)}" for h in hosts), "LSB_DJOB_NUMPROC": str(len(slots)),
           "LSB_SUB_HOST": record["submit_host"], "LSB_OUTPUTFILE": out, "LSB_ERRORFILE": err,
           "PATH": f"{HERE}:{os.environ['PATH']}"}
    if "-Q" in opts:
        env["LSB_EXIT_REQUEUE"] = opts["-Q"]
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(gpus)))
    (job / "job.json").write_text(json.dumps(record, indent=1))
    (job / "env.json").write_text(json.dumps(env))
    write(job, "stat", "PEND")
    event(job, "submit")
    start_supervisor(str(job_id))
    print(f"Job <{job_id}> is submitted to queue <{record['queue']}>.")


def on_host(host: str) -> str:
    """The command prefix that runs on a test host: its network and UTS namespace, as a remote node."""
    if not Path(f"/run/netns/{host}").exists():
        return ""
    return f"nsenter --net=/run/netns/{host} -- unshare --uts -- sh -c 'hostname {host} && exec \"$0\" \"$@\"'"


# --- the supervisor: one per job, from dispatch to its end (sbatchd's part) ----------------------------------------

def supervise(job_id: str) -> None:
    job = job_dir(job_id)
    rec = json.loads((job / "job.json").read_text())
    env = json.loads((job / "env.json").read_text())
    while True:
        runs = sum(1 for e in history(job) if e["event"] == "start")
        if runs:  # a requeued job pends until the next dispatch
            deadline = time.time() + rec["requeue_delay_s"]
            while time.time() < deadline and not (job / "kill_request").exists():
                time.sleep(POLL_S)
        if (job / "kill_request").exists():  # bkill of a pending job
            (job / "kill_request").unlink()
            finish(job, "EXIT", 130, "TERM_OWNER")
            return
        outcome = run_once(job, rec, env, restart=runs > 0)
        if outcome is None:  # requeued
            continue
        finish(job, *outcome)
        return


def finish(job: Path, stat: str, code: int, reason) -> None:
    write(job, "exit_code", str(code))
    write(job, "exit_reason", reason or "-")
    write(job, "stat", stat)
    event(job, "finish", stat=stat, code=code, reason=reason)


def signal_job(job: Path, pgid: int, signum: int, why: str) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return
    event(job, "signal", signal=signal.Signals(signum).name[3:], why=why)


def run_once(job: Path, rec: dict, env: dict, restart: bool):
    """Dispatch the script once; None if the job is requeued, else (stat, exit code, exit reason)."""
    (job / "requeue_request").unlink(missing_ok=True)
    out = open(rec["out"], rec["out_mode"])
    err = out if rec["err"] == rec["out"] else open(rec["err"], rec["err_mode"])
    run_env = dict(env)
    command = ["bash", str(job / "script.sh")]
    if restart:
        run_env["LSB_RESTART"] = "Y"
        command = ["bash", "-c", 'export LSB_RESTART_PID=$$; exec bash "$0"', str(job / "script.sh")]
    hosts = list(dict.fromkeys(rec["slots"]))
    cwd = rec["cwd"] if Path(rec["cwd"]).is_dir() else None
    proc = subprocess.Popen(shlex.split(on_host(hosts[0])) + command, env=run_env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=out, stderr=err, start_new_session=True)
    out.close()
    err.close()
    write(job, "pid", str(proc.pid))
    for name in ("exit_code", "exit_reason"):
        (job / name).unlink(missing_ok=True)
    write(job, "stat", "RUN")
    event(job, "start", pid=proc.pid, hosts=hosts, restart=restart)
    started = time.time()
    limit, warn_at = rec["runlimit_s"], None
    if limit is not None and rec["warning_s"] is not None:
        warn_at = max(0.0, limit - rec["warning_s"])
    reason, plan = None, []  # plan: [(seconds since start, signal, why)] still to send
    interval = rec["terminate_interval_s"]
    while proc.poll() is None:
        now = time.time() - started
        if warn_at is not None and now >= warn_at:
            signal_job(job, proc.pid, signal_number(rec["warning_action"]), "job warning action")
            warn_at = None
        if reason != "TERM_REQUEUE_OWNER" and (job / "requeue_request").exists():
            reason = "TERM_REQUEUE_OWNER"  # killed as bkill kills
            plan = [(now, signal.SIGINT, "brequeue"), (now, signal.SIGTERM, "brequeue"),
                    (now + interval, signal.SIGKILL, "brequeue")]
        elif reason is None and (job / "kill_request").exists():
            reason = "TERM_OWNER"
            plan = [(now, signal.SIGINT, "bkill"), (now, signal.SIGTERM, "bkill"), (now + interval, signal.SIGKILL, "bkill")]
        elif reason is None and limit is not None and now >= limit:
            reason = "TERM_RUNLIMIT"
            grace = rec["runlimit_grace_s"]
            plan = [(now, signal.SIGUSR2, "run limit"), (now + grace, signal.SIGINT, "run limit"),
                    (now + grace, signal.SIGTERM, "run limit"), (now + grace + interval, signal.SIGKILL, "run limit")]
        while plan and now >= plan[0][0]:
            signal_job(job, proc.pid, plan[0][1], plan[0][2])
            plan.pop(0)
        time.sleep(POLL_S)
    try:  # what the script left running in its process group ends with it (a requeued job must not run twice)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if (job / "requeue_request").exists():  # also when the script exited by itself right after `brequeue`
        reason = "TERM_REQUEUE_OWNER"
    requeue_value = rec["requeue_exit_values"] and reason != "TERM_OWNER" and requeues_on(rec["requeue_exit_values"], code)
    stat = "DONE" if code == 0 and reason is None else "EXIT"
    event(job, "end", code=code, stat=stat, reason=reason, requeue="brequeue" if reason == "TERM_REQUEUE_OWNER"
          else "exit value" if requeue_value else None)
    write(job, "exit_code", str(code))
    if reason == "TERM_REQUEUE_OWNER" or requeue_value:
        write(job, "stat", "PEND")
        event(job, "requeued", why=reason or f"requeue exit value {code}")
        return None
    return stat, code, reason


# --- the user commands ---------------------------------------------------------------------------------------------

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
    "jobid": lambda job, rec: str(rec["id"]),
    "stat": lambda job, rec: read(job, "stat", "UNKWN"),
    "exit_code": lambda job, rec: read(job, "exit_code", "-") if read(job, "stat") in ("DONE", "EXIT") else "-",
    "exec_host": lambda job, rec: ":".join(dict.fromkeys(rec["slots"])) if read(job, "stat") != "PEND" else "-",
    "job_name": lambda job, rec: rec["name"],
    "queue": lambda job, rec: rec["queue"],
    "user": lambda job, rec: rec["user"],
    "from_host": lambda job, rec: rec["submit_host"],
    "exit_reason": lambda job, rec: read(job, "exit_reason", "-") if read(job, "stat") in ("DONE", "EXIT") else "-",
    "run_limit": lambda job, rec: f"{rec['runlimit_s'] / rec['minute_s']:.1f}/0" if rec["runlimit_s"] else "-",
}


def bjobs(argv) -> None:
    flags, ids = job_ids(argv, ("-o", "-q", "-u", "-J"))
    if not ids:
        ids = sorted((p.name for p in STATE.glob("[0-9]*") if read(p, "stat") not in ("DONE", "EXIT")), key=int) \
            if STATE.is_dir() else []
        if not ids:
            print("No unfinished job found")
            return
    status = 0
    if "-l" in flags:
        for job_id in ids:
            job = job_dir(job_id)
            if not (job / "job.json").exists():
                print(f"Job <{job_id}> is not found", file=sys.stderr)
                status = 255
                continue
            print_long(job, json.loads((job / "job.json").read_text()), bjobs_style=True)
        sys.exit(status)
    fields = str(flags.get("-o", "jobid user stat queue from_host exec_host job_name")).split()
    fields = [f.split(":")[0].lower() for f in fields if not f.startswith("delimiter=")]
    unknown = [f for f in fields if f not in BJOBS_FIELDS]
    if unknown:
        refuse(f"{unknown[0]}: Illegal field.")
    if "-noheader" not in flags:
        print(" ".join(f.upper() for f in fields))
    for job_id in ids:
        job = job_dir(job_id)
        if not (job / "job.json").exists():
            print(f"Job <{job_id}> is not found", file=sys.stderr)
            status = 255
            continue
        rec = json.loads((job / "job.json").read_text())
        print(" ".join(BJOBS_FIELDS[f](job, rec) for f in fields))
    sys.exit(status)


def bkill(argv) -> None:
    flags, ids = job_ids(argv, ("-s",))
    for job_id in ids:
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
        (job / "kill_request").write_text(getpass.getuser())
        event(job, "kill_request", user=getpass.getuser())
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
    for job_id in ids:
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
    lines = []
    for e in events:
        t, kind = stamp(e["t"]), e["event"]
        if kind == "submit":
            lines.append(f"{t}: Submitted from host <{rec['submit_host']}>, to Queue <{rec['queue']}>, "
                         f"CWD <{rec['cwd']}>{extra};")
            if rec["runlimit_s"]:
                lines.append(f"\n RUNLIMIT\n {rec['runlimit_s'] / rec['minute_s']:.1f} min\n")
        elif kind == "start":
            hosts = rec["slots"]
            where = " ".join(f"<{h}>" if hosts.count(h) == 1 else f"<{hosts.count(h)}*{h}>" for h in dict.fromkeys(hosts))
            lines.append(f"{t}: Dispatched {len(hosts)} Task(s) on Host(s) {where}, Allocated {len(hosts)} Slot(s) "
                         f"on Host(s) {where};")
            lines.append(f"{t}: Starting (Pid {e['pid']});" + (" Job restarted (LSB_RESTART=Y);" if e["restart"] else ""))
        elif kind == "signal":
            lines.append(f"{t}: Signal <{e['signal']}> sent to the job ({e['why']});")
        elif kind == "kill_request":
            lines.append(f"{t}: Signal <KILL> requested by user or administrator <{e['user']}>;")
        elif kind == "requeue_request":
            lines.append(f"{t}: Signal <REQUEUE_PEND> requested by user or administrator <{e['user']}>;")
        elif kind == "end":
            if e["stat"] == "DONE":
                lines.append(f"{t}: Done successfully. The CPU time used is 0.0 seconds;")
            else:
                lines.append(f"{t}: Exited with exit code {e['code']}. The CPU time used is 0.0 seconds;")
            if e["reason"]:
                lines.append(f"{t}: Completed <exit>; {e['reason']}: {REASONS[e['reason']]};")
        elif kind == "requeued":
            lines.append(f"{t}: Pending: Job has been requeued ({e['why']});")
        elif kind == "finish" and e["stat"] == "EXIT" and not any(x["event"] == "end" for x in events[-3:]):
            lines.append(f"{t}: Exited; {e['reason']}: {REASONS.get(e['reason'], '')};")  # killed while pending
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
        ids = sorted((p.name for p in STATE.glob("[0-9]*") if (p / "job.json").exists()), key=int) \
            if STATE.is_dir() else []
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


def blaunch(argv) -> None:
    if argv[:1] != ["-z"] or len(argv) < 3:
        refuse("blaunch: usage: blaunch -z HOST command [args]")
    host, command = argv[1], argv[2:]
    allowed = set(Path(os.environ["LSB_DJOB_HOSTFILE"]).read_text().split())
    if host not in allowed:
        refuse(f"blaunch: {host} is not a host of job {os.environ.get('LSB_JOBID')}")
    prefix = shlex.split(on_host(host))
    os.execvp((prefix or command)[0], prefix + command)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--supervise"]:
        supervise(sys.argv[2])
    else:
        {"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "brequeue": brequeue, "bhist": bhist,
         "blaunch": blaunch}[Path(sys.argv[0]).name](sys.argv[1:])
