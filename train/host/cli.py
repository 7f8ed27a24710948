"""`bin/run-cluster`: resolve, check, render and submit a training job; rerun, race, follow, cancel it.

    run-cluster CLUSTER PROFILE [EXPERIMENT] [--set KEY=VALUE ...] [--dry-run] [--dev]
    run-cluster CLUSTER PROFILE [EXPERIMENT] -- COMMAND ...     your own code: COMMAND runs in the image
    run-cluster CLUSTER PROFILE [EXPERIMENT] --sweep KEY=V1,V2 [--sweep ...]|--sweep-file F [--max-parallel K]
    run-cluster CLUSTER --first-to-start PROFILE_A PROFILE_B [EXPERIMENT]
    run-cluster --rerun runs/<id>
    run-cluster status|logs|cancel runs/<id>
    run-cluster sync runs/<id>                   upload what its trackers logged offline
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
import os
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

from train.errors import UserError, raise_all
from train.host import project, runs
from train.host.images import store
from train.host.images.locations import run_image
from train.host.jobs.build import DEFAULT_EXPERIMENT, Request, Site, build
from train.host.runs.queue import one_run, show_and_queue
from train.host.usage import Parser


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="run-cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("cluster", nargs="?", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("profile", nargs="?", help="a profile of that cluster")
    p.add_argument("experiment", nargs="?", help="a name in experiments/ or a YAML path (default: the profile's own "
                                                  f"experiment, else {DEFAULT_EXPERIMENT})")
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
        if argv and (argv[0] in RUN_COMMANDS or "--rerun" in argv):
            from train.host.remote.commands import proxied  # a run that lives on a cluster over SSH

            done = proxied(argv)
            if done is not None:
                return done
        if argv and argv[0] in ("report", "compare"):
            from train.host.remote.commands import fetched  # runs on a cluster over SSH: their small files here

            argv = fetched(argv)
        if argv and argv[0] in SUBCOMMANDS:
            return SUBCOMMANDS[argv[0]](argv)
        return submit_command(argv, command)
    except UserError as err:
        for line in err.lines:
            print(f"run-cluster: error: {line}", file=sys.stderr)
        return 2


def lazily(module: str, function: str = "main", skip_name: bool = True) -> Callable[[List[str]], int]:
    """A subcommand's entry, imported when it runs: a command never pays for another's imports (matplotlib...)."""
    def run(argv: List[str]) -> int:
        return getattr(__import__(module, fromlist=[function]), function)(argv[1:] if skip_name else argv)
    return run


def names(argv: List[str]) -> int:
    from train.catalog import describe  # torch-free: the registries' tables, not their modules

    print(describe())
    return 0


RUN_COMMANDS = ("status", "logs", "cancel", "resume")
SUBCOMMANDS: Dict[str, Callable[[List[str]], int]] = {
    **{name: lazily("train.host.runs.commands", "run_command", skip_name=False) for name in RUN_COMMANDS},
    "images": lazily("train.host.images.commands"),
    "data": lazily("train.host.data.commands"),
    "probe-data": lazily("train.host.probe_data"),
    "fetch": lazily("train.host.remote.commands", "fetch_command"),
    "sync": lazily("train.host.runs.tracker_sync"),
    "runs": lazily("train.host.runs.table"),
    "report": lazily("train.host.reports.report"),
    "compare": lazily("train.host.reports.compare"),
    "scaling": lazily("train.host.reports.scaling"),
    "doctor": lazily("train.host.doctor"),
    "check-cluster": lambda argv: check_cluster_command(argv[1:]),
    "init-cluster": lazily("train.host.init_cluster"),
    "names": names,
}


def submit_command(argv: List[str], command: Optional[List[str]]) -> int:
    """A new run, a sweep, a race of two profiles, or a rerun: checked in full before anything is queued."""
    args = parser().parse_intermixed_args(argv)
    args.command = command
    refuse_mixed(args, command)
    if args.rerun:
        return rerun(args)
    if not args.cluster or not (args.profile or args.first_to_start):
        raise UserError("name a cluster and a profile: run-cluster CLUSTER PROFILE [EXPERIMENT] (or --rerun runs/<id>)")
    site = Site.load(args.cluster)
    if site.user.get("ssh"):
        return over_ssh(site, args, argv)
    if args.first_to_start:
        return first_to_start(args, site)
    if args.sweeps or args.sweep_file:
        from train.host.runs import sweep

        plan = sweep.sweep_plan(site, request(args, args.profile, args.experiment), args.sweeps, args.sweep_file,
                                args.max_parallel)
        return show_and_queue(plan, args.dry_run, args.wait, args.timeout)
    sub = build(site, request(args, args.profile, args.experiment))
    return show_and_queue(one_run(sub), args.dry_run, args.wait, args.timeout)


def over_ssh(site: Site, args, argv: List[str]) -> int:
    """A cluster your settings reach over SSH: what needs only the config is checked here, then the same command
    runs on its login node (train/host/remote)."""
    from train.host.data import store as data_store
    from train.host.jobs.build import config_of, stale_image
    from train.host.jobs.job import new_run_id
    from train.host.remote import commands as remote

    unsupported = [name for name, value in (("--first-to-start", args.first_to_start), ("--dev", args.dev),
                                            ("a command after --", args.command)) if value]
    if unsupported:
        raise UserError(f"{', '.join(unsupported)} does not run over ssh yet; run it on {site.cluster.name}'s login "
                        f"node (or drop ssh: for {site.cluster.name} from your settings)")
    profile = site.cluster.profile(args.profile)
    run, _, _ = config_of(site, profile, request(args, args.profile, args.experiment))
    run_id = args.run_id or new_run_id(site.cluster.name, args.profile)
    flavor = args.flavor or site.cluster.partition(profile.partition).image
    image = store.current(flavor, project.images_dir())  # this machine's store; `images:` of ssh settings is theirs
    for line in stale_image(image, args.stale_image_ok):  # the cluster gets this checkout's code: the same check
        print(f"run-cluster: {line}", file=sys.stderr)
    here = data_store.data_root(project.images_dir())  # this machine's data store, beside its images
    data = data_store.find(run.data.image, here) if run.data.image else None
    return remote.submit(site, argv, run_id, args.dry_run, image, data)


def refuse_mixed(args, command: Optional[List[str]]) -> None:
    if (args.sweeps or args.sweep_file or args.max_parallel is not None) and (args.rerun or args.first_to_start):
        raise UserError("--sweep starts new runs; --rerun and --first-to-start take none")
    if args.max_parallel is not None and not (args.sweeps or args.sweep_file):
        raise UserError("--max-parallel caps a sweep; add --sweep KEY=V1,V2,...")
    if command and (args.rerun or args.first_to_start):
        raise UserError("a command after -- starts a new run; --rerun and --first-to-start take none")


def request(args, profile: str, experiment: Optional[str], **recorded) -> Request:
    """The Request the command line asks for (a rerun's recorded values over it); a command's own code has no
    default experiment."""
    asked = dict(overrides=list(args.overrides), run_id=args.run_id, flavor=args.flavor, dry_run=args.dry_run,
                 stale_image_ok=args.stale_image_ok, command=args.command, dev=args.dev)
    return Request(profile, experiment, **{**asked, **recorded})


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


def first_to_start(args, site: Site) -> int:
    """Seed 004's hybrid: queue two shapes of the same training, keep whichever the scheduler starts first."""
    from train.host.runs.race import race_plan

    experiment = args.profile or args.experiment  # None: each profile's own, else the default
    subs = [build(site, request(args, name, experiment, run_id=None)) for name in args.first_to_start]
    return show_and_queue(race_plan(subs, args.first_to_start, args.timeout), args.dry_run, False, args.timeout)


def rerun(args) -> int:
    """The run's own cluster, profile, config and image digest; extra --set values apply on top and are recorded."""
    extra = [name for name, value in (("CLUSTER", args.cluster), ("--flavor", args.flavor),
                                      ("--first-to-start", args.first_to_start), ("--dev", args.dev)) if value]
    if extra:
        raise UserError(f"--rerun takes the run's own cluster, profile and image; drop {', '.join(extra)} "
                        f"(or submit anew without --rerun)")
    args.rerun = runs.find(args.rerun)
    manifest = runs.read_manifest(args.rerun)
    site = Site.load(manifest["cluster_file"])
    record = run_image(manifest, f"the image of {args.rerun}", site.image_store)
    # The run's config.yaml already holds every override it was submitted with; new ones go on top.
    sub = build(site, request(args, manifest["profile"], str(Path(args.rerun) / "config.yaml"), flavor=record.flavor,
                              image=record, rerun_of=manifest["run_id"], recorded_code=manifest.get("code"),
                              code_from=Path(args.rerun), data_sha256=runs.data_digest(manifest)))
    return show_and_queue(one_run(sub), args.dry_run, args.wait, args.timeout)
