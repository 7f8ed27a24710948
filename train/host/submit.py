"""A new run from the command line: `run-cluster CLUSTER PROFILE [EXPERIMENT]`, a sweep, a race of two profiles
(--first-to-start), a rerun; each checked in full before anything is queued. The other commands: train/host/commands.py.
argparse rather than fire: `--set` repeats, and fire cannot take a repeated flag."""
import argparse
import sys
from typing import List, Optional

from train.shared.errors import UserError
from train.host import commands, project, runs
from train.host.images import store
from train.host.jobs.build import DEFAULT_EXPERIMENT, Request, Site, build
from train.host.runs.queue import one_run, show_and_queue
from train.host.usage import Parser

USAGE = """run-cluster CLUSTER PROFILE [EXPERIMENT] [--set KEY=VALUE ...] [--dry-run] [options]
       run-cluster CLUSTER PROFILE [EXPERIMENT] -- COMMAND ...     your own code: COMMAND runs in the image
       run-cluster --rerun runs/<id>
       run-cluster COMMAND ...                                      (below; run-cluster COMMAND --help)"""


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="run-cluster", usage=USAGE, epilog=commands.listing(),
               description="Render, check and submit a training job; follow, fetch and compare its runs.",
               formatter_class=argparse.RawDescriptionHelpFormatter)
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
                   help="a sweep's elements at once (default 4 on a cluster, this machine's CPUs / cpus_per_task "
                        "on local)")
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
    from train.host.runs.rerun import rerun_submission

    sub = rerun_submission(runs.find(args.rerun), args.overrides, args.run_id, args.dry_run, args.stale_image_ok)
    return show_and_queue(one_run(sub), args.dry_run, args.wait, args.timeout)
