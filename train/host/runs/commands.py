"""`run-cluster status|logs|cancel|resume runs/<id>` (or a sweep's directory): one run's state, every segment and
what ended it; its logs; cancelling it; continuing it. The state always comes from train/host/runs/ending.py."""
import json
from pathlib import Path
from typing import List

from train.shared.errors import UserError
from train.host import fabric, runs
from train.host.runs import causes, ending, segments, sweep, sweep_state, tracker_sync
from train.host.runs.ending import has_ended, run_state
from train.host.runs.follow import follow_log
from train.host.runs.queue import one_run
from train.host.runs.showing import show_and_queue
from train.host.runs.resume import prepare_resume, queue_resume
from train.host.schedulers import State, adapter
from train.host.usage import Parser

RUN_COMMANDS = ("status", "logs", "cancel", "resume")
NOT_SHOWN = ("state", "ended_by", "gone", "cancelling")  # the state's fields that status words itself, or not at all


def run_command(argv: List[str]) -> int:
    args = parser(argv[0]).parse_args(argv[1:])
    if argv[0] == "resume":
        return sweep.resume(args) if sweep_state.is_sweep(args.run_dir) else resume(args)
    if sweep_state.is_sweep(args.run_dir):
        return sweep_command(argv[0], args)
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


def parser(command: str) -> Parser:
    p = Parser(prog=f"run-cluster {command}")
    p.add_argument("run_dir", type=runs.find, help="a run's (or a sweep's) directory, or its id")
    p.add_argument("--follow", "-f", action="store_true", help="logs: keep printing until the job ends")
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
        sweep_state.print_logs(args.run_dir)
    elif command == "status":
        print(sweep_state.status_table(args.run_dir))
    else:
        sweep_state.cancel(args.run_dir)
    return 0


def resume(args) -> int:
    run_dir = args.run_dir.resolve()
    sub = prepare_resume(run_dir, args.profile, args.overrides, args.dry_run)
    return show_and_queue(one_run(sub, lambda sub: queue_resume(sub, run_dir)), args.dry_run, args.wait, args.timeout)


def print_status(manifest: dict, scheduler, run_dir: Path) -> None:
    """The state (train/host/runs/ending.py: whose word it is), every segment, and what ended the run: the event that
    ended it (a cancel, the scheduler), or a failure its logs name."""
    job_id = manifest["scheduler"]["job_id"]
    state = run_state(scheduler, job_id, run_dir)
    print(f"{manifest['run_id']}: {scheduler.name} job {job_id} {ending.shown(state)}"
          + "".join(f" {k}={v}" for k, v in state.items() if k not in NOT_SHOWN and v))
    if manifest.get("data"):
        print(f"  data: image {runs.data_version(manifest, 64)}")
    for segment in segments.read(run_dir):
        print(f"  {segment.line()}")
    for line in tracker_sync.status_lines(run_dir):  # where its trackers log, and whether an offline run is uploaded
        print(f"  {line}")
    runs.update_manifest(run_dir, segments=segments.as_records(run_dir))
    job = manifest["job"]
    slow_network = fabric.verdict(run_dir, job.get("fabric", "")) if job.get("check_fabric") else None
    if slow_network:
        print(f"  WARNING: {slow_network}")
    if state["state"] == State.COMPLETED and (run_dir / "results.json").is_file():
        print_results(json.loads((run_dir / "results.json").read_text()), run_dir)
    elif has_ended(state):
        cause = state.get("ended_by") or causes.diagnose(run_dir)
        if cause:
            print(f"  cause: {cause}")


def print_results(results: dict, run_dir: Path) -> None:
    """A completed run's final and best metrics and how fast it trained, copied into its manifest."""
    runs.update_manifest(run_dir, gpu={k: results.get(k) for k in ("gpu", "cuda", "driver")},
                         speed={k: results.get(k) for k in ("precision", "compiled", "input", "throughput")})
    print("  result: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                   for k, v in results.items() if k.startswith(("final_", "best_", "epochs"))))
    if results.get("input"):
        print(f"  speed: {input_wait_line(results)}")


def cancel(scheduler, job_id: str, run_dir: Path, run_id: str) -> None:
    """A job that has ended keeps how it ended; any other is cancelled, the run recording it first."""
    state = run_state(scheduler, job_id, run_dir)
    if has_ended(state):
        print(f"{scheduler.name} job {job_id} ({run_id}) has ended: {ending.describe(state)}; nothing to cancel")
        return
    ending.cancel([(run_dir, job_id)], lambda: scheduler.cancel(job_id, run_dir))
    print(f"cancelled {scheduler.name} job {job_id} ({run_id})")


def input_wait_line(results: dict) -> str:
    """How the run trained and whether it waited for data (train/image/speed.py's figures, rank 0)."""
    wait = results["input"]
    rate = results.get("throughput", {}).get("samples_per_s")
    line = (f"precision {results.get('precision')},{f' {rate:.1f} samples/s,' if rate else ''} waited for data "
            f"{wait['wait_fraction']:.0%} of {wait['data_wait_s'] + wait['compute_s']:.0f} s of training")
    if wait.get("data_from") in ("image", "staged"):
        line += f" (data read from the {'staged' if wait['data_from'] == 'staged' else 'shared'} data image)"
    if wait["input_bound"]:
        line += f": input-bound, raise data.num_workers ({wait['num_workers']} now)"
    return line
