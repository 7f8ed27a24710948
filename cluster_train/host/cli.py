"""`bin/run-cluster`: a new run (cluster_train/host/submit.py), or one of the commands of
cluster_train/host/commands.py; `run-cluster --help` lists them all, `run-cluster COMMAND --help` tells each. Only what
the command asked for is imported: a dry run does not load the reports' or the image store's modules, `status` not the
job builder's."""
import os
import sys
from typing import List, Optional

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import commands
from cluster_train.host.usage import Parser

RUN_COMMANDS = tuple(c.name for c in commands.COMMANDS if c.takes_name)  # status, logs, cancel, resume: of one run


def main(argv: Optional[List[str]] = None) -> int:
    """bin/run-cluster: every command, its errors as one line each (exit status 2); a reader that went away
    (`status ... | head -1`) or Ctrl-C ends it quietly, as it ends `cat`."""
    try:
        status = dispatch(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not in Python's shutdown
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):  # what Python flushes at exit goes nowhere, quietly
            os.dup2(devnull, stream.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command ended by a closed pipe
    except KeyboardInterrupt:  # Ctrl-C, the usual end of `logs --follow`
        print("run-cluster: interrupted", file=sys.stderr)
        return 130


def dispatch(argv: List[str]) -> int:
    try:
        argv, command = split_command(argv)
        if argv and (argv[0] in RUN_COMMANDS or "--rerun" in argv):
            from cluster_train.host.remote.commands import proxied  # a run that lives on a cluster over SSH

            done = proxied(argv)
            if done is not None:
                return done
        if argv and argv[0] in ("report", "compare"):
            from cluster_train.host.remote.commands import fetched  # runs on a cluster over SSH: their small files here

            argv = fetched(argv)
        found = commands.find(argv)
        if found:
            return commands.run(found, argv)
        from cluster_train.host.submit import submit_command

        return submit_command(argv, command)
    except UserError as err:
        for line in err.lines:
            print(f"run-cluster: error: {line}", file=sys.stderr)
        return 2


def split_command(argv: List[str]):
    """`... -- python train.py --config x.yaml`: run-cluster's own arguments, and the user's command after --."""
    if "--" not in argv:
        return argv, None
    at = argv.index("--")
    if not argv[at + 1:]:
        raise UserError("nothing after --; name your command, e.g. -- python train.py --config configs/x.yaml")
    return argv[:at], argv[at + 1:]


def names(argv: List[str]) -> int:
    Parser(prog="run-cluster names", description="every model, fusion head, data set, task, strategy, optimizer, "
                                                 "scheduler and precision an experiment may name").parse_args(argv)
    from cluster_train.shared.catalog import describe  # torch-free: the registries' tables, not their modules

    print(describe())
    return 0


def check_cluster_command(argv: List[str]) -> int:
    from cluster_train.host.check_cluster import check_cluster

    p = Parser(prog="run-cluster check-cluster", description="check a cluster file: schema, every profile rendered "
                                                               "and checked, the scheduler's own parser where present")
    p.add_argument("cluster", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("--no-scheduler", action="store_true",
                   help="skip the scheduler's own check and drift (a scheduler serving another "
                        "cluster is never asked: scheduler_cluster)")
    args = p.parse_args(argv)
    report, problems = check_cluster(args.cluster, scheduler_check=not args.no_scheduler)
    if report:
        print("\n".join(report))
    raise_all([UserError(line) for line in problems])
    return 0
