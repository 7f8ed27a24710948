"""The command line of a study: `run-cluster CLUSTER PROFILE EXPERIMENT --search FILE.yaml` checks and shows it, then
drives it in the foreground (or, with --no-wait, in the background); `run-cluster status|logs|cancel|resume
runs/<study>` act on it as on a run."""
import sys
import time
from pathlib import Path

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.jobs.build import Site
from cluster_train.host.runs.ending import cancel_run, has_ended, run_state
from cluster_train.host.runs.showing import show_and_queue
from cluster_train.host.search import record as rec
from cluster_train.host.search.driver import drive
from cluster_train.host.search.optuna_study import storage_url
from cluster_train.host.search.plan import detach, driving_time, study_plan
from cluster_train.host.search.showing import status_text
from cluster_train.host.search.spec import read_spec_file


def start(args, job) -> int:
    """A new study: checked and shown, created, then driven (args: the submit command's)."""
    extras = [name for name, value in (("--sweep", args.sweeps), ("--sweep-file", args.sweep_file),
                                       ("--rerun", args.rerun), ("--first-to-start", args.first_to_start),
                                       ("--after", args.after), ("--pipeline", args.pipeline)) if value]
    if extras:
        raise UserError(f"--search queues its own trials; drop {', '.join(extras)}")
    driving_time(args.timeout)
    site = Site.load(args.cluster)
    refuse_remote(site)
    spec = read_spec_file(args.search)
    plan = study_plan(site, job._request(job.profile, args.dry_run), spec, args.max_parallel, args.experiment)
    status = show_and_queue(plan, args.dry_run, False, args.timeout, args.strict_budget)
    if args.dry_run or status:
        return status
    study_dir = plan.run_dirs[0]
    print(f"study directory {study_dir}", flush=True)
    if args.wait is False:
        print(detach(study_dir, args.timeout))
        return 0
    return drive_here(study_dir, args.timeout)


def refuse_remote(site: Site) -> None:
    """The driver reads every trial's run directory, so it runs where they are: a cluster reached over SSH is
    refused, saying where to start it (the command line's --search and the API's Job.search alike)."""
    if site.user.get("ssh"):
        raise UserError(f"--search runs its driver where the runs' directories are: start it on {site.cluster.name}'s "
                        f"login node (ssh {site.user['ssh']}); `run-cluster resume` continues it from there")


def ready_to_drive(study_dir: Path, timeout_s: float) -> None:
    """What would stop a resumed study's driver, refused before the resume changes anything (removes `cancelled`,
    takes the driver's lock): the driving time, the record whole, the storage's password (the command line's resume
    and Study.resume alike, in this order)."""
    driving_time(timeout_s)
    storage_url(rec.read_record(study_dir, rec.RECORDED + rec.DRIVEN))


def drive_here(study_dir: Path, timeout_s: float) -> int:
    """Drive in the foreground, each event a line; Ctrl-C stops the driver only (its trials run on)."""
    try:
        done = drive(study_dir, timeout_s, lambda progress: print(progress.event, flush=True))
    except KeyboardInterrupt:
        print(f"run-cluster: the study's driver stopped; its queued trials run on. Continue it: run-cluster resume "
              f"{study_dir}", file=sys.stderr)
        return 130
    if not done:
        cancelled = (study_dir / rec.CANCELLED).exists()
        print(f"run-cluster: the study {'was cancelled' if cancelled else 'has not finished within --timeout'}; "
              f"continue it: run-cluster resume {study_dir}", file=sys.stderr)
        return 1
    return 0


def study_command(command: str, args) -> int:
    """status, logs, cancel or resume of a study's directory."""
    study_dir = Path(args.run_dir).resolve()
    if command == "status":
        if args.json:
            raise UserError(f"status --json is of one run; name a trial's run directory (run-cluster status "
                            f"{study_dir} lists them)")
        print(status_text(study_dir))
    elif command == "logs":
        log = study_dir / "driver.log"
        print(log.read_text() if log.is_file() else f"no driver.log: the driver ran in the foreground; each trial's "
                                                      f"log: run-cluster logs {study_dir}/batch-N/eK")
    elif command == "cancel":
        print(cancel(study_dir))
    else:
        return resume(study_dir, args)
    return 0


def resume(study_dir: Path, args) -> int:
    if args.profile or args.overrides or args.dry_run:
        raise UserError("resume of a study continues it as it was asked; it takes no --profile, --set or --dry-run")
    ready_to_drive(study_dir, args.timeout)
    (study_dir / rec.CANCELLED).unlink(missing_ok=True)
    if args.wait is False:
        print(detach(study_dir, args.timeout))
        return 0
    return drive_here(study_dir, args.timeout)


def cancel(study_dir: Path) -> str:
    """Stop the study: its driver stops at its next look (the record says so), every running trial's job is
    cancelled; `resume` takes it up again."""
    rec.read_record(study_dir)
    (study_dir / rec.CANCELLED).write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z\n"))
    cancelled = []
    for trial in rec.read_trials(study_dir):
        run_dir = Path(trial["run_dir"]) if trial.get("run_dir") else None
        if trial["state"] != "RUNNING" or run_dir is None:
            continue
        manifest = runs.read_manifest(run_dir)
        if not has_ended(run_state(manifest.adapter, trial["job_id"], run_dir)):
            cancel_run(manifest, run_dir)
            cancelled.append(str(trial["number"]))
    return (f"cancelled study {study_dir.name}: its driver stops; trials {', '.join(cancelled) or 'none'} "
            f"cancelled. Continue it: run-cluster resume {study_dir}")
