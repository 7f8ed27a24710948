"""`run-cluster status|logs|cancel|resume runs/<id>` (or a sweep's directory): one run's state, every segment and
what ended it; its logs; cancelling it; continuing it. Each parses its arguments, calls the library functions that
`Run` (cluster_train/host/api/run.py) calls too, and prints; the state always comes from
cluster_train/host/runs/ending.py."""
import json
from pathlib import Path
from typing import List

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.runs import sweep, sweep_state
from cluster_train.host.runs.ending import cancel_run
from cluster_train.host.runs.follow import logs_text
from cluster_train.host.runs.waiting import follow_log
from cluster_train.host.runs.queue import one_run
from cluster_train.host.runs.resume import prepare_resume, queue_resume, resumed_line
from cluster_train.host.runs.run_status import status_lines, status_of
from cluster_train.host.runs.showing import show_and_queue
from cluster_train.host.usage import Parser

RUN_COMMANDS = ("status", "logs", "cancel", "resume")


def run_command(argv: List[str]) -> int:
    args = parser(argv[0]).parse_args(argv[1:])
    if (Path(args.run_dir) / "study.json").is_file():  # a study (cluster_train/host/search): its own commands
        from cluster_train.host.search.commands import study_command

        return study_command(argv[0], args)
    if argv[0] == "resume":
        return sweep.resume(args) if sweep_state.is_sweep(args.run_dir) else resume(args)
    if sweep_state.is_sweep(args.run_dir):
        return sweep_command(argv[0], args)
    manifest = runs.read_manifest(args.run_dir)
    if argv[0] == "status":
        status = status_of(manifest, manifest.adapter, args.run_dir)
        print(json.dumps(status.as_dict()) if args.json else "\n".join(status_lines(status)))
    elif argv[0] == "cancel":
        print(cancel_run(manifest, args.run_dir))
    elif args.follow:
        follow_log(manifest.adapter, manifest.job_id, args.run_dir)
    else:
        print(logs_text(args.run_dir), end="")
    return 0


def parser(command: str) -> Parser:
    p = Parser(prog=f"run-cluster {command}")
    p.add_argument("run_dir", type=runs.find, help="a run's (or a sweep's) directory, or its id")
    p.add_argument("--follow", "-f", action="store_true", help="logs: keep printing until the job ends")
    if command == "status":
        p.add_argument("--json", action="store_true", help="one JSON object (what a laptop asks a cluster over SSH)")
    if command == "resume":
        p.add_argument("--profile", help="resume on another shape of the same cluster (strategies that re-shard)")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--wait", dest="wait", action="store_true", default=None)
        p.add_argument("--no-wait", dest="wait", action="store_false")
        p.add_argument("--timeout", type=float, default=24 * 3600)
    return p


def sweep_command(command: str, args) -> int:
    if command == "logs":
        if args.follow:
            raise UserError(f"logs --follow follows one run; name an element: {args.run_dir / 'e0'}")
        print(sweep_state.logs_text(args.run_dir), end="")
    elif command == "status":
        if args.json:
            raise UserError(f"status --json is of one run; name an element: {args.run_dir / 'e0'}")
        print(sweep_state.status_table(args.run_dir))
    else:
        print(sweep_state.cancel(args.run_dir))
    return 0


def resume(args) -> int:
    run_dir = args.run_dir.resolve()
    sub = prepare_resume(run_dir, args.profile, args.overrides, args.dry_run)
    return show_and_queue(one_run(sub, lambda sub: queue_and_say(sub, run_dir)), args.dry_run, args.wait, args.timeout)


def queue_and_say(sub, run_dir: Path) -> str:
    """Queue the resume and say so; its job id, which `follow` takes."""
    job_id = queue_resume(sub, run_dir)
    print(resumed_line(sub, run_dir, job_id))
    return job_id


def print_status(manifest: dict, scheduler, run_dir: Path) -> None:
    """`status` of a run as `scheduler` sees it (tests give their own schedulers)."""
    print("\n".join(status_lines(status_of(manifest, scheduler, run_dir))))
