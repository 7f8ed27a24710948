#!/usr/bin/env python3
"""A stand-in for LSF's bsub, bjobs, bkill and blaunch, for tests only (LSF has no free implementation).

It checks what real bsub checks before accepting a job (queue, -n, -W, -gpu and -R syntax; #BSUB lines read from a
script given on standard input), places the job on the queue's hosts, and runs the script on the first one with the
variables LSF sets (LSB_JOBID, LSB_DJOB_HOSTFILE with one line per slot, LSB_HOSTS, LSB_MCPU_HOSTS, %J in -o/-e).
Hosts are the test Slurm cluster's network namespaces (tests/slurm/cluster.sh): `blaunch -z HOST cmd` runs cmd in
HOST's namespace, as a remote task would. Queues: tests/lsf/queues.json. State: $CT_LSF_STATE (default /tmp/ct-lsf).
"""
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("CT_LSF_STATE", "/tmp/ct-lsf"))
QUEUES = json.loads((HERE / "queues.json").read_text())
GPU = re.compile(r"^num=\d+(:(mode=(shared|exclusive_process)|mps=(yes|no)|j_exclusive=(yes|no)|gmodel=[\w-]+|gmem=\d+[MG]?))*$")
RUNLIMIT = re.compile(r"^(\d+:)?\d+$")
RES_SECTION = re.compile(r"(select|order|rusage|span|same|cu|affinity)\[([^\]]*)\]")
RUSAGE = re.compile(r"^mem=\d+(\.\d+)?(KB|MB|GB|TB)?$")
SPAN = re.compile(r"^(hosts=1|ptile=\d+)$")
FLAGS_WITH_VALUE = {"-q", "-J", "-n", "-gpu", "-W", "-R", "-u", "-o", "-e", "-oo", "-eo", "-M", "-P", "-G"}
FLAGS = {"-B", "-N", "-x", "-I"}


def refuse(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(255)


def parse_bsub(argv, script: str) -> dict:
    """#BSUB lines first, then the command line, as bsub does (the command line wins)."""
    words = []
    for line in script.splitlines()[1:]:
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


def check(opts: dict) -> None:
    queue = opts.get("-q", "normal")
    if queue not in QUEUES:
        refuse(f"{queue}: No such queue. Job not submitted.")
    if not re.fullmatch(r"[1-9]\d*", opts.get("-n", "1")):
        refuse(f"Bad argument for option -n: {opts['-n']}. Job not submitted.")
    if "-W" in opts and not RUNLIMIT.match(opts["-W"]):
        refuse(f"{opts['-W']}: Bad RUNLIMIT specification. Job not submitted.")
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


def bsub(argv) -> None:
    script = sys.stdin.read() if not argv or argv[-1].startswith("-") else Path(argv.pop()).read_text()
    opts = parse_bsub(argv, script)
    check(opts)
    slots = place(opts)
    STATE.mkdir(parents=True, exist_ok=True)
    counter = STATE / "last_job_id"
    job_id = int(counter.read_text()) + 1 if counter.exists() else 1000
    counter.write_text(str(job_id))
    job = STATE / str(job_id)
    job.mkdir()
    (job / "script.sh").write_text(script)
    (job / "hostfile").write_text("".join(f"{h}\n" for h in slots))
    (job / "stat").write_text("RUN")
    out = opts.get("-o", opts.get("-oo", str(job / "stdout"))).replace("%J", str(job_id)).replace("%I", "0")
    err = opts.get("-e", opts.get("-eo", out)).replace("%J", str(job_id)).replace("%I", "0")
    hosts = list(dict.fromkeys(slots))
    gpus = int(re.match(r"num=(\d+)", opts["-gpu"]).group(1)) if "-gpu" in opts else 0
    env = {**os.environ, "LSB_JOBID": str(job_id), "LSB_JOBNAME": opts.get("-J", "job"),
           "LSB_QUEUE": opts.get("-q", "normal"), "LSB_DJOB_HOSTFILE": str(job / "hostfile"),
           "LSB_HOSTS": " ".join(slots), "LSB_MCPU_HOSTS": " ".join(f"{h} {slots.count(h)}" for h in hosts),
           "LSB_DJOB_NUMPROC": str(len(slots)), "LSB_SUB_HOST": os.uname().nodename,
           "PATH": f"{HERE}:{os.environ['PATH']}"}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(gpus)))
    runner = (f'{on_host(hosts[0])} bash "$1" >"$2" 2>"$3"; code=$?; '
              f'[ "$(cat "$4/stat")" = RUN ] && {{ [ $code = 0 ] && echo DONE || echo EXIT; }} >"$4/stat"; echo $code >"$4/exit_code"')
    proc = subprocess.Popen(["bash", "-c", runner, "lsf-job", str(job / "script.sh"), out, err, str(job)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    (job / "pid").write_text(str(proc.pid))
    print(f"Job <{job_id}> is submitted to queue <{opts.get('-q', 'normal')}>.")


def on_host(host: str) -> str:
    """The command prefix that runs on a test host: its network and UTS namespace, as a remote node."""
    if not Path(f"/run/netns/{host}").exists():
        return ""
    return f"nsenter --net=/run/netns/{host} -- unshare --uts -- sh -c 'hostname {host} && exec \"$0\" \"$@\"'"


def bjobs(argv) -> None:
    job = STATE / argv[-1]
    if not job.is_dir():
        refuse(f"Job <{argv[-1]}> is not found")
    code = (job / "exit_code").read_text().strip() if (job / "exit_code").exists() else "-"
    hosts = list(dict.fromkeys((job / "hostfile").read_text().split()))
    print(f"{(job / 'stat').read_text().strip()} {code} {':'.join(hosts)}")


def bkill(argv) -> None:
    job = STATE / argv[-1]
    if not job.is_dir():
        refuse(f"Job <{argv[-1]}>: No matching job found")
    (job / "stat").write_text("EXIT")
    try:
        os.killpg(int((job / "pid").read_text()), signal.SIGTERM)
    except ProcessLookupError:
        pass
    print(f"Job <{argv[-1]}> is being terminated")


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
    {"bsub": bsub, "bjobs": bjobs, "bkill": bkill, "blaunch": blaunch}[Path(sys.argv[0]).name](sys.argv[1:])
