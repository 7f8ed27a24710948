"""What bsub accepts, as IBM's LSF 10.1 checks it, for the LSF stand-in of the tests (see standin.py).

bsub's options and the #BSUB directives of a script given on standard input, refused with real LSF's messages and exit
status 255, so that a test meets what a wrong job script meets on a real cluster; the -Q requeue exit values; the
placement of a job's slots on its queue's hosts (tests/lsf/queues.json). Parsing and checking only, no job state: the
other modules take refuse and signal_number from here.
"""
import json
import math
import re
import shlex
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUEUES = json.loads((HERE / "queues.json").read_text())
GPU = re.compile(r"^num=\d+(:(mode=(shared|exclusive_process)|mps=(yes|no)|j_exclusive=(yes|no)"
                 r"|gmodel=[\w-]+|gmem=\d+[MG]?))*$")
RUNLIMIT = re.compile(r"^(\d+:)?\d+(/[A-Za-z0-9_.-]+)?$")  # [hour:]minute[/host_name | /host_model]
RES_SECTION = re.compile(r"(select|order|rusage|span|same|cu|affinity)\[([^\]]*)\]")
RUSAGE = re.compile(r"^mem=\d+(\.\d+)?(KB|MB|GB|TB)?$")
SPAN = re.compile(r"^(hosts=1|ptile=\d+)$")
REQUEUE_VALUE = re.compile(r"^(all|~?\d+|EXCLUDE\(\d+( \d+)*\))$")
FLAGS_WITH_VALUE = {"-q", "-J", "-n", "-gpu", "-W", "-R", "-u", "-o", "-e", "-oo", "-eo", "-M", "-P", "-G",
                    "-wa", "-wt", "-Q", "-w"}
FLAGS = {"-B", "-N", "-x", "-I", "-Is", "-r", "-rn", "-ti"}
DONE = re.compile(r"^\s*done\((\d+)\)\s*$")  # the one dependency condition the stand-in models: done(job_ID)


def refuse(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(255)


def minutes(value: str) -> int:
    """[hour:]minute[/host] -> minutes (the stand-in's hosts all have CPU factor 1: no normalizing)."""
    hours, _, mins = value.split("/")[0].rpartition(":")
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


def dependencies(expression: str) -> list:
    """bsub -w 'done(ID) && done(ID)': the job ids it waits on (other conditions and operators are LSF's, not
    modelled here: refused, so that a test never relies on them silently)."""
    terms = [DONE.match(term) for term in expression.split("&&")]
    if not all(terms):
        refuse(f"{expression}: stand-in: only done(job_ID) conditions joined by && are modelled. Job not submitted.")
    return [term.group(1) for term in terms]


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
    if "-wt" in opts and not re.match(r"^(\d+:)?\d+$", opts["-wt"]):  # -wt [hour:]minute
        refuse(f"{opts['-wt']}: Bad job action warning time. Job not submitted.")
    if "-wa" in opts and signal_number(opts["-wa"]) not in {int(s) for s in signal.Signals}:
        refuse(f"{opts['-wa']}: Bad job warning action. Job not submitted.")
    if "-Q" in opts and not all(REQUEUE_VALUE.match(t) for t in requeue_tokens(opts["-Q"]) or [""]):
        refuse(f"{opts['-Q']}: Bad requeue exit value specification. Job not submitted.")
    if "-ti" in opts and "-w" not in opts:  # bsub -ti: "Use only with the -w option"
        refuse("-ti: Option -ti must be used with -w. Job not submitted.")
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
    left_out = set(re.findall(r"hname\s*!=\s*([\w.-]+)", span))  # select[hname!=h1 && hname!=h2]
    usable = [host for host in queue["hosts"] if host not in left_out]
    if ptile > queue["slots_per_host"] or hosts > len(usable):
        refuse(f"stand-in: {slots} slots x ptile {ptile} cannot be placed on queue hosts {usable} "
               f"({queue['slots_per_host']} slots each); real LSF would leave the job pending")
    return [usable[i // ptile] for i in range(slots)]
