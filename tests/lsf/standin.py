#!/usr/bin/env python3
"""A stand-in for LSF's bsub, bjobs, bkill, brequeue, bmod, bhist, blaunch, bqueues, lshosts and bhosts, for tests only
(LSF has no free implementation).

It checks what real bsub checks before accepting a job (queue, -n, -W, -wa/-wt, -Q, -gpu and -R syntax; #BSUB lines
read from a script given on standard input), places the job on the queue's hosts, and runs the script on the first one
with the variables LSF sets (LSB_JOBID, LSB_JOBINDEX, LSB_DJOB_HOSTFILE with one line per slot, LSB_HOSTS,
LSB_MCPU_HOSTS, %J and %I in -o/-e). Hosts are the test Slurm cluster's network namespaces (tests/slurm/cluster.sh):
`blaunch -z HOST cmd` runs cmd in HOST's namespace, as a remote task would; without them a job runs on this machine.
Queues: tests/lsf/queues.json.

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
- job arrays: `-J "name[1-N]%K"` (indices also as lists and steps, `[1,3,5-9:2]`) submits one job whose elements
  are JOBID[i], each run with LSB_JOBINDEX=i (0 outside an array) and LSB_JOBNAME name[i], %I in -o/-e its index; at
  most K elements run at once; bjobs/bkill/brequeue take JOBID (every element) or JOBID[i] (one).
- `bmod -R "res_req" [-R ...] ID` replaces the job's resource requirements; a running job's apply at its next
  dispatch: a requeued job runs on the hosts they allow (`select[hname!=HOST]` leaves a host out).
- `bhist -l ID` shows every run and how it ended (requeue, run limit, DONE/EXIT); records stay in the state dir. A
  run whose shell a signal ended (bkill's, a run limit's) says `Exited by signal N.`, as IBM documents it ("Termination
  reasons displayed by bacct, bhist, and bjobs"), one that exited `Exited with exit code N.`
- job dependencies: `-w 'done(ID) && done(ID)'` holds the job (PEND) until every one is DONE; a dependency on a job
  LSF cannot find fails the submission. Once one has exited otherwise the condition can never be met: the job is an
  orphan, left pending unless `-ti` (LSF's per-job automatic orphan termination) ends it at once, EXIT with
  TERM_ORPHAN_SYSTEM.
- mbatchd's memory: a finished job stays in bjobs (`bjobs ID`, `bjobs -a`) for CLEAN_PERIOD seconds after it
  finished (lsb.params; LSF's default 3600); then bjobs says `Job <ID> is not found`, bkill and brequeue find no
  matching job, and only bhist, which reads the event log, still knows it.
- an execution host failing under a running job (host_failure.py; `standin.py --host-down HOST`, a test's trigger, and
  `--host-up HOST`), as LSF 10.1 documents it: bhosts shows the host `unavail`; the job's tasks there are lost; LSF
  shuts the whole blaunch job down (its default when a task's RES is lost) with its TERMINATE signals; a rerunnable
  job (`bsub -r`) is requeued with its id and rerun on available hosts, any other is lost, EXIT.
Clock and intervals, for tests (seconds): CT_LSF_MINUTE_SECONDS (an LSF minute in -W/-wt; default 60),
CT_LSF_RUNLIMIT_GRACE (SIGUSR2 at the run limit to the kill; default 10 LSF minutes), CT_LSF_TERMINATE_INTERVAL
(SIGINT/SIGTERM to SIGKILL; default 10, LSF's JOB_TERMINATE_INTERVAL), CT_LSF_REQUEUE_DELAY (PEND time of a requeued
job before it is dispatched again; default 2), CT_LSF_CLEAN_PERIOD (CLEAN_PERIOD; default 3600). They are read at
bsub time and kept with the job.
State: $CT_LSF_STATE (default /tmp/ct-lsf), one directory per job: job.json, env.json, script.sh, hostfile, stat,
exit_code, exit_reason, pid, history.jsonl (every event with its time), host_failed; hosts/, a file per host down.
Interactive jobs (`bsub -I`, `-Is`: bsub waits, the command attached to its terminal): interactive.py.
Modules, siblings of this file: bsub_options.py (what bsub accepts and refuses, requeue values, placement on hosts),
records.py (the state directory and job records), supervisor.py (the per-job supervisor), job_commands.py (bjobs,
bkill, brequeue, bhist), site_commands.py (bqueues -l, lshosts, bhosts: the queues and hosts, hosts.json),
host_failure.py (a host's failure under a job). Here: bsub,
blaunch and the entry point that the wrappers (symlinks to this file named bsub, bjobs, ...) and the supervisor run.
"""
import getpass
import json
import os
import re
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARRAY_MAX = 1000  # LSF's default MAX_JOB_ARRAY_SIZE
sys.path.insert(0, str(HERE))  # the sibling modules, wherever this runs from (also with PYTHONSAFEPATH set)
from bsub_options import check, dependencies, minutes, parse_bsub, place, refuse, split_bsub  # noqa: E402
from interactive import attached  # noqa: E402
from job_commands import bhist, bjobs, bkill, bmod, brequeue  # noqa: E402
from records import STATE, event, existing_job, job_dir, write  # noqa: E402
from host_failure import host_down, host_up  # noqa: E402
from site_commands import bhosts, bqueues, lshosts  # noqa: E402
from supervisor import on_host, start_supervisor, supervise  # noqa: E402


def seconds(env_name: str, default: float) -> float:
    return float(os.environ.get(env_name, default))


def bsub(argv) -> None:
    words, command = split_bsub(argv)
    interactive = "-I" in words or "-Is" in words
    if interactive and not command:
        refuse("bsub: an interactive job (-I, -Is) needs a command. Job not submitted.")
    if interactive:  # the command runs as given, attached to bsub's terminal
        script, directives = shlex.join(command), ""
    elif command:  # `bsub [options] script`: the file runs as the job; bsub reads #BSUB lines only from stdin
        script, directives = Path(command[0]).read_text(), ""
    else:
        script = directives = sys.stdin.read()
    opts = parse_bsub(words, directives)
    check(opts)
    slots = place(opts)
    waits_on = dependencies(opts["-w"]) if "-w" in opts else []
    for job_id in waits_on:  # "If you specify a dependency on a job that LSF cannot find ... your job submission fails"
        existing_job(job_id, f"done({job_id}): No matching job found. Job not submitted.")
    name, indices, cap = array_of(opts.get("-J", "job"))
    STATE.mkdir(parents=True, exist_ok=True)
    counter = STATE / "last_job_id"
    job_id = int(counter.read_text()) + 1 if counter.exists() else 1000
    counter.write_text(str(job_id))
    if indices:  # a job array: one record per element, JOBID[i], each with its own supervisor
        job = job_dir(str(job_id))
        job.mkdir()
        (job / "job.json").write_text(json.dumps({"id": job_id, "name": name, "array": indices, "cap": cap}))
        for index in indices:
            create_job(f"{job_id}[{index}]", job_id, index, f"{name}[{index}]", cap, opts, script, slots, waits_on)
    else:
        create_job(str(job_id), job_id, 0, name, None, opts, script, slots, waits_on, supervised=not interactive)
    print(f"Job <{job_id}> is submitted to queue <{opts.get('-q', 'normal')}>.", flush=True)
    if interactive:
        sys.exit(attached(str(job_id), command, "-Is" in opts))


def array_of(job_name: str):
    """-J "name[1-10]%2" (also "name[1,3,5-9:2]"): (name, indices, at most this many running), as LSF documents
    job arrays; a plain name: (name, [], None)."""
    found = re.fullmatch(r"(.*)\[([^\]]*)\](?:%(\d+))?", job_name)
    if not found:
        return job_name, [], None
    indices = []
    for part in found.group(2).split(","):
        spec = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part)
        if not spec or int(spec.group(1)) < 1:
            refuse(f"{job_name}: Bad job name. Job not submitted.")
        first, last, step = int(spec.group(1)), int(spec.group(2) or spec.group(1)), int(spec.group(3) or 1)
        indices += range(first, last + 1, step)
    if not indices or len(indices) > ARRAY_MAX or (found.group(3) and int(found.group(3)) < 1):
        refuse(f"{job_name}: Bad job name. Job not submitted.")
    return found.group(1), sorted(set(indices)), int(found.group(3)) if found.group(3) else None


def create_job(key: str, job_id: int, index: int, name: str, cap, opts: dict, script: str, slots: list,
               waits_on: list, supervised: bool = True) -> None:
    """One job's (or array element's) record, environment and supervisor; %J and %I in -o/-e are its ids."""
    job = job_dir(key)
    job.mkdir()
    (job / "script.sh").write_text(script)
    (job / "hostfile").write_text("".join(f"{h}\n" for h in slots))
    out = opts.get("-o", opts.get("-oo", str(job / "stdout"))).replace("%J", str(job_id)).replace("%I", str(index))
    err = opts.get("-e", opts.get("-eo", out)).replace("%J", str(job_id)).replace("%I", str(index))
    hosts = list(dict.fromkeys(slots))
    gpus = int(re.match(r"num=(\d+)", opts["-gpu"]).group(1)) if "-gpu" in opts else 0
    minute_s = seconds("CT_LSF_MINUTE_SECONDS", 60)
    runlimit_s = minutes(opts["-W"]) * minute_s if "-W" in opts else None
    warn = "-wa" in opts and "-wt" in opts  # LSF: a warning action needs both
    record = {
        "id": key, "array_id": job_id if index else None, "index": index, "array_cap": cap,
        "name": name, "queue": opts.get("-q", "normal"), "user": getpass.getuser(),
        "submit_host": os.uname().nodename, "cwd": os.getcwd(), "command": script.splitlines()[0] if script else "",
        "slots": slots, "out": out, "err": err, "out_mode": "w" if "-oo" in opts and "-o" not in opts else "a",
        "err_mode": "w" if "-eo" in opts and "-e" not in opts else "a",
        "runlimit": opts.get("-W"), "runlimit_s": runlimit_s,
        "warning_action": opts.get("-wa") if warn else None, "warning_time": opts.get("-wt") if warn else None,
        "warning_s": minutes(opts["-wt"]) * minute_s if warn else None, "requeue_exit_values": opts.get("-Q"),
        "minute_s": minute_s, "runlimit_grace_s": seconds("CT_LSF_RUNLIMIT_GRACE", 10 * minute_s),
        "terminate_interval_s": seconds("CT_LSF_TERMINATE_INTERVAL", 10),
        "requeue_delay_s": seconds("CT_LSF_REQUEUE_DELAY", 2),
        "clean_period_s": seconds("CT_LSF_CLEAN_PERIOD", 3600),
        "waits_on": waits_on, "orphan_termination": "-ti" in opts,
        "resources": opts["-R"], "rerunnable": "-r" in opts,  # a rerun's placement; bsub -r (host_failure.py)
    }
    env = {**os.environ, "LSB_JOBID": str(job_id), "LSB_JOBINDEX": str(index), "LSB_JOBNAME": name,
           "LSB_QUEUE": record["queue"],
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
    if supervised:  # an interactive job's bsub runs it itself (interactive.py)
        start_supervisor(key)


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
    elif sys.argv[1:2] in (["--host-down"], ["--host-up"]):  # a test's trigger, no LSF command (host_failure.py)
        (host_down if sys.argv[1] == "--host-down" else host_up)(sys.argv[2])
    else:
        {"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "brequeue": brequeue, "bhist": bhist, "bmod": bmod,
         "blaunch": blaunch, "bqueues": bqueues, "lshosts": lshosts, "bhosts": bhosts}[Path(sys.argv[0]).name](
            sys.argv[1:])
