"""The LSF stand-in's commands that describe the site (see standin.py): `bqueues -l [queue ...]`, `lshosts -w`,
`lshosts -gpu` and `bhosts [-w] [host ...]`, printed in the layout of IBM's LSF 10.1 (the long queue listing: a QUEUE:
line, its description, PARAMETERS/STATISTICS, RUNLIMIT in minutes where the queue has one, USERS: and HOSTS:;
lshosts' wide table with maxmem in M; lshosts -gpu one line per GPU; bhosts' default table, a host's STATUS as
host_failure.py leaves it). Queues: queues.json (runlimit_min, description); hosts: hosts.json."""
import json
import sys
from pathlib import Path

from bsub_options import QUEUES, refuse
from host_failure import status
from records import STATE, read

HOSTS = json.loads((Path(__file__).resolve().parent / "hosts.json").read_text())


def bqueues(argv) -> None:
    if argv[:1] != ["-l"]:
        refuse("stand-in: only `bqueues -l [queue ...]` is modelled")
    for name in argv[1:]:
        if name not in QUEUES:
            refuse(f"{name}: No such queue")
    for name in argv[1:] or QUEUES:
        sys.stdout.write(queue_long(name, QUEUES[name]))


def queue_long(name: str, queue: dict) -> str:
    limit = queue.get("runlimit_min")
    runlimit = f"\n RUNLIMIT\n {limit:.1f} min\n" if limit else ""
    return (f"\nQUEUE: {name}\n  -- {queue.get('description', '')}\n\nPARAMETERS/STATISTICS\n"
            "PRIO NICE STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN SSUSP USUSP  RSV PJOBS\n"
            " 30    0  Open:Active       -    -    -    -     0     0     0     0     0    0    0\n"
            "Interval for a host to accept two jobs is 0 seconds\n"
            f"{runlimit}\nSCHEDULING PARAMETERS\n"
            "           r15s   r1m  r15m   ut      pg    io   ls    it    tmp    swp    mem\n"
            " loadSched   -     -     -     -       -     -    -     -      -      -      -\n"
            " loadStop    -     -     -     -       -     -    -     -      -      -      -\n\n"
            f"USERS: all  \nHOSTS:  {' '.join(queue['hosts'])} \n")


def lshosts(argv) -> None:
    if argv == ["-gpu"]:
        print(f"{'HOST_NAME':<20} {'gpu_id':>6} {'gpu_model':>20} {'gpu_driver':>12} {'gpu_factor':>10} numa_id")
        for host, spec in HOSTS.items():
            for gpu in range(spec["gpus"]):
                print(f"{host:<20} {gpu:>6} {spec['gpu_model']:>20} {spec['gpu_driver']:>12} {'7.0':>10} 0")
    elif argv == ["-w"]:
        print(f"{'HOST_NAME':<20} {'type':>10} {'model':>14} {'cpuf':>5} {'ncpus':>5} {'maxmem':>8} {'maxswp':>7} "
              "server RESOURCES")
        for host, spec in HOSTS.items():
            print(f"{host:<20} {'X86_64':>10} {'Intel_EM64T':>14} {'60.0':>5} {spec['ncpus']:>5} "
                  f"{str(spec['maxmem_mb']) + 'M':>8} {'1024M':>7} {'Yes':>6} (mg gpu)")
    else:
        refuse("stand-in: only `lshosts -w` and `lshosts -gpu` are modelled")


def bhosts(argv) -> None:
    """`bhosts [-w] [host ...]`: LSF's default host listing, one line per host; its STATUS `ok`, or `unavail` once
    down (host_failure.py)."""
    names = [word for word in argv if word != "-w"]
    unknown = [name for name in names if name not in HOSTS]
    for name in unknown:
        print(f"{name}: Bad host name, host group name or cluster name", file=sys.stderr)
    print(f"{'HOST_NAME':<20} {'STATUS':<15} {'JL/U':>4} {'MAX':>6} {'NJOBS':>6} {'RUN':>6} {'SSUSP':>6} "
          f"{'USUSP':>6} {'RSV':>6}")
    for name in [n for n in names if n in HOSTS] or HOSTS:
        slots = sum(read(job, "hostfile").split().count(name) for job in STATE.glob("[0-9]*")
                    if read(job, "stat") == "RUN")
        print(f"{name:<20} {status(name):<15} {'-':>4} {HOSTS[name]['ncpus']:>6} {slots:>6} {slots:>6} {0:>6} "
              f"{0:>6} {0:>6}")
    if unknown:
        sys.exit(255)
