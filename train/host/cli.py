"""`bin/run-cluster`: resolve, check, render and submit a training job; rerun, race, follow, cancel it.

    run-cluster CLUSTER PROFILE [EXPERIMENT] [--set KEY=VALUE ...] [--dry-run] [--dev]
    run-cluster CLUSTER PROFILE [EXPERIMENT] -- COMMAND ...     your own code: COMMAND runs in the image
    run-cluster CLUSTER PROFILE [EXPERIMENT] --sweep KEY=V1,V2 [--sweep ...]|--sweep-file F [--max-parallel K]
    run-cluster CLUSTER --first-to-start PROFILE_A PROFILE_B [EXPERIMENT]
    run-cluster --rerun runs/<id>
    run-cluster status|logs|cancel runs/<id>
    run-cluster resume runs/<id> [--profile P] [--set KEY=VALUE ...]
    run-cluster report runs/<id>|sweeps/<id> [--metric M]
    run-cluster compare runs/<a> runs/<b> ...
    run-cluster scaling CLUSTER PROFILE... [EXPERIMENT] [--steps N]   scaling efficiency against 1 GPU
    run-cluster names
    run-cluster check-cluster FILE
    run-cluster images list|import FILE.sif|push IMAGE oras://...|pull oras://...|verify [DIGEST]

argparse rather than fire: `--set` repeats, and fire cannot take a repeated flag.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional

from train.errors import UserError, raise_all
from train.host import fabric, runs
from train.host.images.locations import run_image
from train.host.jobs import code_snapshot
from train.host.jobs.build import Submission, prepare, queue
from train.host.runs import causes, ending, segments
from train.host.runs.ending import has_ended, run_state
from train.host.runs.follow import follow, follow_log
from train.host.runs.resume import prepare_resume, queue_resume
from train.host.schedulers import NOT_STARTED, State, adapter
from train.host.usage import Parser

DEFAULT_EXPERIMENT = "cifar100_resnet"
RUN_COMMANDS = ("status", "logs", "cancel", "resume")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="run-cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("cluster", nargs="?", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("profile", nargs="?", help="a profile of that cluster")
    p.add_argument("experiment", nargs="?", help=f"a name in experiments/ or a YAML path (default {DEFAULT_EXPERIMENT})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set trainer.max_epochs=5 (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="check and print the job and its script; submit nothing")
    p.add_argument("--sweep", dest="sweeps", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="one run per value (repeatable: the product of the values), queued as one job array")
    p.add_argument("--sweep-file", metavar="FILE",
                   help="a YAML list of runs, each a mapping of keys to values, queued as one job array")
    p.add_argument("--max-parallel", type=int, metavar="K",
                   help="a sweep's elements at once (default 4 on a cluster, this machine's CPUs / cpus_per_task on local)")
    p.add_argument("--rerun", metavar="RUN_DIR", help="submit again with the same config and image digest")
    p.add_argument("--first-to-start", nargs=2, metavar=("PROFILE_A", "PROFILE_B"),
                   help="submit both, keep whichever starts first, cancel the other")
    p.add_argument("--flavor", help="image flavor to run (default: the one the partition needs)")
    p.add_argument("--run-id", help="name of the run directory (default: time, cluster, profile, random suffix)")
    p.add_argument("--dev", action="store_true",
                   help="run the task from this checkout's train package over the image's copy (no image rebuild)")
    p.add_argument("--stale-image-ok", action="store_true",
                   help="submit with an image built from other code than this checkout's (it runs its own code)")
    p.add_argument("--wait", dest="wait", action="store_true", default=None, help="wait for the job, following its log")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="return once the job is queued")
    p.add_argument("--timeout", type=float, default=24 * 3600, help="seconds --wait and --first-to-start wait at most")
    return p


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
        if argv and argv[0] in RUN_COMMANDS:
            return run_command(argv)
        if argv and argv[0] == "images":
            from train.host.images.commands import main as images_main

            return images_main(argv[1:])
        if argv and argv[0] == "report":
            from train.host.reports.report import main as report_main

            return report_main(argv[1:])
        if argv and argv[0] == "compare":
            from train.host.reports.compare import main as compare_main

            return compare_main(argv[1:])
        if argv and argv[0] == "scaling":
            from train.host.reports.scaling import main as scaling_main

            return scaling_main(argv[1:])
        if argv and argv[0] == "check-cluster":
            return check_cluster_command(argv[1:])
        if argv and argv[0] == "names":
            from train.catalog import describe  # torch-free: the registries' tables, not their modules

            print(describe())
            return 0
        args = parser().parse_intermixed_args(argv)
        args.command = command
        if (args.sweeps or args.sweep_file or args.max_parallel) and (args.rerun or args.first_to_start):
            raise UserError("--sweep starts new runs; --rerun and --first-to-start take none")
        if args.max_parallel and not (args.sweeps or args.sweep_file):
            raise UserError("--max-parallel caps a sweep; add --sweep KEY=V1,V2,...")
        if command and (args.rerun or args.first_to_start):
            raise UserError("a command after -- starts a new run; --rerun and --first-to-start take none")
        if args.rerun:
            return rerun(args)
        if args.first_to_start:
            return first_to_start(args)
        if not args.cluster or not args.profile:
            raise UserError("name a cluster and a profile: run-cluster CLUSTER PROFILE [EXPERIMENT] (or --rerun runs/<id>)")
        if args.sweeps or args.sweep_file:
            from train.host.runs import sweep

            args.experiment = args.experiment or (None if command else DEFAULT_EXPERIMENT)
            return sweep.show_and_queue(args, args.sweeps, args.max_parallel, args.sweep_file)
        return submit_one(args, args.profile, args.experiment)
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


def check_cluster_command(argv: List[str]) -> int:
    from train.host.check_cluster import check_cluster

    p = Parser(prog="run-cluster check-cluster", description="check a cluster file: schema, every profile rendered "
                                                               "and checked, the scheduler's own parser where present")
    p.add_argument("cluster", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("--no-scheduler", action="store_true",
                   help="skip the scheduler's own check (this machine's scheduler is another site's)")
    args = p.parse_args(argv)
    report, problems = check_cluster(args.cluster, scheduler_check=not args.no_scheduler)
    if report:
        print("\n".join(report))
    raise_all([UserError(line) for line in problems])
    return 0


def submit_one(args, profile: str, experiment: Optional[str]) -> int:
    sub = prepare(args.cluster, profile, experiment or (None if args.command else DEFAULT_EXPERIMENT), args.overrides,
                  args.run_id, args.flavor, dry_run=args.dry_run, stale_image_ok=args.stale_image_ok,
                  command=args.command, dev=args.dev)
    return show_and_queue(args, sub)


def show_and_queue(args, sub: Submission, submit: Callable[[Submission], str] = queue) -> int:
    """Print what will run; then, unless --dry-run, queue it and (by default on the local cluster) follow it."""
    print(sub.summary)
    for warning in sub.warnings:
        print(f"run-cluster: {warning}", file=sys.stderr)
    if args.dry_run:
        code_snapshot.discard(sub.code.snapshot if sub.code else None)
        print(f"--- {sub.job.scheduler} script (dry run: nothing submitted) ---")
        print(sub.script, end="")
        return 0
    job_id = submit(sub)
    scheduler = adapter(sub.job.scheduler)
    if args.wait if args.wait is not None else scheduler.follow_by_default:
        return follow(scheduler, job_id, Path(sub.job.run_dir), args.timeout)
    return 0


def first_to_start(args) -> int:
    """Seed 004's hybrid: queue two shapes of the same training, keep whichever the scheduler starts first."""
    experiment = args.profile or args.experiment or DEFAULT_EXPERIMENT
    a, b = (prepare(args.cluster, name, experiment, args.overrides, None, args.flavor, dry_run=args.dry_run,
                    stale_image_ok=args.stale_image_ok)
            for name in args.first_to_start)
    for sub in (a, b):
        print(sub.summary)
        for warning in sub.warnings:
            print(f"run-cluster: {warning}", file=sys.stderr)
    if args.dry_run:
        print("--- dry run: nothing submitted ---")
        return 0
    if a.job.scheduler != b.job.scheduler:
        raise UserError("both profiles of --first-to-start must be on the same cluster")
    ids = [queue(a), queue(b)]
    scheduler = adapter(a.job.scheduler)
    winner = race(scheduler, ids, [Path(a.job.run_dir), Path(b.job.run_dir)], args.timeout)
    loser = 1 - winner
    for i, sub in enumerate((a, b)):
        runs.update_manifest(Path(sub.job.run_dir), first_to_start={
            "won": i == winner, "winner_run": Path((a, b)[winner].job.run_dir).name,
            "cancelled_run": Path((a, b)[loser].job.run_dir).name})
    print(f"{args.first_to_start[winner]} started first (job {ids[winner]}); cancelled {args.first_to_start[loser]} "
          f"(job {ids[loser]})")
    return 0


def race(scheduler, job_ids, run_dirs, timeout_s: float, poll_s: float = 1.0) -> int:
    """Index of the job that starts first; the other is cancelled (and its run says by whom). On a tie the first one
    listed wins."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        states = [scheduler.state(j, d)["state"] for j, d in zip(job_ids, run_dirs)]
        started = [s not in NOT_STARTED for s in states]
        if any(started):
            winner = started.index(True)
            loser = 1 - winner
            ending.cancel([(run_dirs[loser], job_ids[loser])], lambda: scheduler.cancel(job_ids[loser], run_dirs[loser]))
            return winner
        time.sleep(poll_s)
    raise UserError(f"neither job {job_ids[0]} nor {job_ids[1]} started within {timeout_s:.0f} s; both are still queued")


def rerun(args) -> int:
    """The run's own cluster, profile, config and image digest; extra --set values apply on top and are recorded."""
    extra = [name for name, value in (("CLUSTER", args.cluster), ("--flavor", args.flavor),
                                      ("--first-to-start", args.first_to_start), ("--dev", args.dev)) if value]
    if extra:
        raise UserError(f"--rerun takes the run's own cluster, profile and image; drop {', '.join(extra)} "
                        f"(or submit anew without --rerun)")
    manifest = runs.read_manifest(Path(args.rerun))
    record = run_image(manifest, f"the image of {args.rerun}")
    # The run's config.yaml already holds every override it was submitted with; new ones go on top.
    sub = prepare(manifest["cluster_file"], manifest["profile"], str(Path(args.rerun) / "config.yaml"),
                  args.overrides, args.run_id, record.flavor, image=record, rerun_of=manifest["run_id"],
                  dry_run=args.dry_run, recorded_code=manifest.get("code"), code_from=Path(args.rerun))
    return show_and_queue(args, sub)


def resume(args) -> int:
    run_dir = args.run_dir.resolve()
    sub = prepare_resume(run_dir, args.profile, args.overrides, args.dry_run)
    return show_and_queue(args, sub, lambda sub: queue_resume(sub, run_dir))


def print_status(manifest: dict, scheduler, run_dir: Path) -> None:
    """The state (train/host/runs/ending.py: whose word it is), every segment, and what ended the run: the event that
    ended it (a cancel, the scheduler), or a failure its logs name."""
    job_id = manifest["scheduler"]["job_id"]
    state = run_state(scheduler, job_id, run_dir)
    print(f"{manifest['run_id']}: {scheduler.name} job {job_id} {state['state'].value}"
          + "".join(f" {k}={v}" for k, v in state.items() if k not in ("state", "ended_by", "gone") and v))
    for segment in segments.read(run_dir):
        print(f"  {segment.line()}")
    runs.update_manifest(run_dir, segments=segments.as_records(run_dir))
    slow_network = fabric.verdict(run_dir) if manifest["job"].get("check_fabric") else None
    if slow_network:
        print(f"  WARNING: {slow_network}")
    if state["state"] == State.COMPLETED and (run_dir / "results.json").is_file():
        results = json.loads((run_dir / "results.json").read_text())
        runs.update_manifest(run_dir, gpu={k: results.get(k) for k in ("gpu", "cuda", "driver")},
                             speed={k: results.get(k) for k in ("precision", "compiled", "input", "throughput")})
        print("  result: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in results.items() if k.startswith(("final_", "best_", "epochs"))))
        if results.get("input"):
            print(f"  speed: {input_wait_line(results)}")
    elif has_ended(state):
        cause = state.get("ended_by") or causes.diagnose(run_dir)
        if cause:
            print(f"  cause: {cause}")


def cancel(scheduler, job_id: str, run_dir: Path, run_id: str) -> None:
    """A job that has ended keeps how it ended; any other is cancelled, the run recording it first."""
    state = run_state(scheduler, job_id, run_dir)
    if has_ended(state):
        print(f"{scheduler.name} job {job_id} ({run_id}) has ended: {ending.describe(state)}; nothing to cancel")
        return
    ending.cancel([(run_dir, job_id)], lambda: scheduler.cancel(job_id, run_dir))
    print(f"cancelled {scheduler.name} job {job_id} ({run_id})")


def input_wait_line(results: dict) -> str:
    """How the run trained and whether it waited for data (train/speed.py's figures, rank 0)."""
    wait = results["input"]
    rate = results.get("throughput", {}).get("samples_per_s")
    line = (f"precision {results.get('precision')},{f' {rate:.1f} samples/s,' if rate else ''} waited for data "
            f"{wait['wait_fraction']:.0%} of {wait['data_wait_s'] + wait['compute_s']:.0f} s of training")
    if wait["input_bound"]:
        line += f": input-bound, raise data.num_workers ({wait['num_workers']} now)"
    return line


def run_command(argv: List[str]) -> int:
    p = Parser(prog=f"run-cluster {argv[0]}")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--follow", "-f", action="store_true", help="logs: keep printing until the job ends")
    if argv[0] == "resume":
        p.add_argument("--profile", help="resume on another shape of the same cluster (strategies that re-shard)")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--wait", dest="wait", action="store_true", default=None)
        p.add_argument("--no-wait", dest="wait", action="store_false")
        p.add_argument("--timeout", type=float, default=24 * 3600)
    args = p.parse_args(argv[1:])
    from train.host.runs import sweep

    if argv[0] == "resume":
        return sweep.resume(args) if sweep.is_sweep(args.run_dir) else resume(args)
    if sweep.is_sweep(args.run_dir) and argv[0] == "logs":
        if args.follow:
            raise UserError(f"logs --follow follows one run; name an element: {args.run_dir / 'e0'}")
        sweep.print_logs(args.run_dir)
        return 0
    if sweep.is_sweep(args.run_dir) and argv[0] == "status":
        print(sweep.status_table(args.run_dir))
        return 0
    if sweep.is_sweep(args.run_dir) and argv[0] == "cancel":
        sweep.cancel(args.run_dir)
        return 0
    manifest = runs.read_manifest(args.run_dir)
    scheduler = adapter(manifest["scheduler"]["name"])
    job_id = manifest["scheduler"]["job_id"]
    if argv[0] == "status":
        print_status(manifest, scheduler, args.run_dir)
    elif argv[0] == "cancel":
        cancel(scheduler, job_id, args.run_dir, manifest["run_id"])
    else:
        follow_log(scheduler, job_id, args.run_dir, forever=args.follow)
    return 0
