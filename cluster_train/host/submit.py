"""A new run from the command line: `run-cluster CLUSTER PROFILE [EXPERIMENT]`, a sweep, a race of two profiles or of
runs on several clusters (--first-to-start), a rerun; each made and checked in full by the API (cluster_train/host/api)
before anything is queued, then shown here. The other commands: cluster_train/host/commands.py.
argparse rather than fire: `--set` repeats, and fire cannot take a repeated flag."""
import argparse
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import commands
from cluster_train.host.api import race
from cluster_train.host.api.job import Job, after_dirs, refuse_mixed
from cluster_train.host.api.over_ssh import checked
from cluster_train.host.api.pipeline import Pipeline, refuse_options
from cluster_train.host.jobs.build import DEFAULT_EXPERIMENT, Site
from cluster_train.host.runs.pipeline import pipeline_plan
from cluster_train.host.runs.queue import one_run
from cluster_train.host.runs.rerun import rerun_submission
from cluster_train.host.runs.showing import show_and_queue
from cluster_train.host.status_line import shown_progress
from cluster_train.host.usage import Parser

USAGE = """run-cluster CLUSTER PROFILE [EXPERIMENT] [--set KEY=VALUE ...] [--dry-run] [options]
       run-cluster CLUSTER PROFILE [EXPERIMENT] -- COMMAND ...     your own code: COMMAND runs in the image
       run-cluster --first-to-start CLUSTER:PROFILE CLUSTER:PROFILE ... [EXPERIMENT]   the first of them to start
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
    p.add_argument("--data", metavar="DIR", help="bind DIR read-only at its own path, in $CT_DATA_ROOT (data.root)")
    p.add_argument("--dry-run", action="store_true", help="check and print the job and its script; submit nothing")
    p.add_argument("--sweep", dest="sweeps", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="one run per value (repeatable: the product of the values), queued as one job array")
    p.add_argument("--sweep-file", metavar="FILE",
                   help="a YAML list of runs, each a mapping of keys to values, queued as one job array")
    p.add_argument("--max-parallel", type=int, metavar="K",
                   help="a sweep's elements at once (default 4 on a cluster, this machine's CPUs / cpus_per_task "
                        "on local)")
    p.add_argument("--search", metavar="FILE",
                   help="an Optuna study over the space FILE gives (objective, trials, sampler, pruner): trials queued "
                        "as job arrays of at most --max-parallel, pruned from their metrics; resume continues it")
    p.add_argument("--rerun", metavar="RUN_DIR", help="submit again with the same config and image digest")
    p.add_argument("--after", metavar="RUN[,RUN]", type=lambda text: [Path(p) for p in text.split(",") if p],
                   default=[], help="start only once these runs (directories or ids) have COMPLETED; cancelled if one "
                                    "ends otherwise. ${run:<id>} in a --set value names a run's directory")
    p.add_argument("--pipeline", metavar="NAME",
                   help="queue every stage of CLUSTER's pipeline NAME (its cluster file's pipelines:), each after the "
                        "ones it names, all checked first")
    p.add_argument("--first-to-start", nargs="+", metavar="PROFILE|CLUSTER:PROFILE",
                   help="PROFILE_A PROFILE_B of CLUSTER, or two or more CLUSTER:PROFILE runs, each on its own cluster "
                        "(over ssh where your settings say so): submit all, keep whichever starts first, cancel the "
                        "rest")
    p.add_argument("--flavor", help="image flavor to run (default: the one the partition needs)")
    p.add_argument("--run-id", help="name of the run directory (default: time, cluster, profile, random suffix)")
    p.add_argument("--dev", action="store_true",
                   help="run the task from this checkout's cluster_train package over the "
                        "image's copy (no image rebuild)")
    p.add_argument("--standalone", action="store_true",
                   help="a one-rank command runs as `python train.py` would: no RANK, WORLD_SIZE, LOCAL_RANK, ... "
                        "(torchrun's --standalone; the same as --set standalone=true)")
    p.add_argument("--stale-image-ok", action="store_true",
                   help="submit with an image built from other code than this checkout's (it runs its own code)")
    p.add_argument("--wait", dest="wait", action="store_true", default=None, help="wait for the job, following its log")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="return once the job is queued")
    p.add_argument("--strict-budget", action="store_true",
                   help="refuse a submission that may pass your GPU-hour budget (budget: in your settings); "
                        "without it, a warning")
    p.add_argument("--timeout", type=float, default=24 * 3600, help="seconds --wait and --first-to-start wait at most")
    return p


def submit_command(argv: List[str], command: Optional[List[str]]) -> int:
    """A new run, a sweep, a race of two profiles, or a rerun: made and checked by the API
    (cluster_train/host/api/job.py), shown and queued here."""
    args = parser().parse_intermixed_args(argv)
    args.overrides = data_override(args.data, args.overrides)
    if args.standalone:  # a config value, so the run's config.yaml records it and --rerun keeps it
        args.overrides.append("standalone=true")
    race.sort_words(args)
    if args.search:
        return search(args, command)
    refuse_mixed(bool(args.sweeps or args.sweep_file), args.max_parallel, rerun=bool(args.rerun),
                 first_to_start=bool(args.first_to_start), command=bool(command), after=bool(args.after))
    if args.rerun:
        return rerun(args)
    if args.pipeline:
        return pipeline(args, command)
    if race.across(args):
        return race_across(args, args.first_to_start, [args.cluster, args.profile, args.experiment])
    if not args.cluster or not (args.profile or args.first_to_start):
        raise UserError("name a cluster and a profile: run-cluster CLUSTER PROFILE [EXPERIMENT] (or --rerun runs/<id>)")
    profile, experiment = args.profile, args.experiment
    if args.first_to_start:  # CLUSTER [EXPERIMENT] --first-to-start A B: the experiment stands where a profile would
        profile, experiment = args.first_to_start[0], args.profile or args.experiment  # None: each profile's own
    job = Job(args.cluster, profile, experiment, overrides=args.overrides, command=command, flavor=args.flavor,
              run_id=args.run_id, dev=args.dev, stale_image_ok=args.stale_image_ok)
    site = Site.load(args.cluster)
    if site.user.get("ssh") and args.first_to_start:  # two profiles of a cluster over SSH: raced as across clusters
        return race_across(args, [f"{args.cluster}:{name}" for name in args.first_to_start], [experiment])
    if site.user.get("ssh"):
        return over_ssh(job, site, args, argv)
    if args.first_to_start or args.sweeps or args.sweep_file:
        plan = job._plan(site, dry_run=args.dry_run, sweeps=args.sweeps, sweep_file=args.sweep_file,
                        max_parallel=args.max_parallel, first_to_start=args.first_to_start, timeout_s=args.timeout,
                        after=args.after)
        return show_and_queue(plan, args.dry_run, args.wait, args.timeout, args.strict_budget)
    return show_and_queue(one_run(job._submission(site, args.dry_run, args.after)), args.dry_run, args.wait,
                          args.timeout, args.strict_budget)


def data_override(data: Optional[str], overrides: List[str]) -> List[str]:
    """--data DIR as the --set it stands for: data.root, absolute from where it was typed, quoted for YAML (a path
    may hold ': '); beside a --set data.root the two would name two directories for one bind."""
    if not data:
        return overrides
    given = next((o for o in overrides if o.partition("=")[0].strip() == "data.root"), None)
    if given:
        raise UserError(f"--data {data} and --set {given} both name the data directory; keep one")
    return [*overrides, "data.root=" + json.dumps(os.path.abspath(os.path.expanduser(data)))]


def search(args, command: Optional[List[str]]) -> int:
    """`run-cluster CLUSTER PROFILE EXPERIMENT --search FILE.yaml`: cluster_train/host/search."""
    from cluster_train.host.search.commands import start

    if not args.cluster or not args.profile:
        raise UserError("name a cluster and a profile: run-cluster CLUSTER PROFILE EXPERIMENT --search FILE.yaml")
    return start(args, Job(args.cluster, args.profile, args.experiment, overrides=args.overrides, command=command,
                           flavor=args.flavor, run_id=args.run_id, dev=args.dev, stale_image_ok=args.stale_image_ok))


def race_across(args, entries: List[str], positionals: List[Optional[str]]) -> int:
    """`run-cluster --first-to-start CLUSTER:PROFILE CLUSTER:PROFILE ... [EXPERIMENT]`: each run checked on its own
    cluster (over SSH where your settings say so), then all queued and the first to start kept."""
    if args.run_id:
        raise UserError(f"--run-id {args.run_id} names one run; --first-to-start queues one per entry: drop --run-id")
    plan = race.race_plan_across(entries, race.experiment_of(positionals),
                                 overrides=args.overrides, flavor=args.flavor, dev=args.dev,
                                 stale_image_ok=args.stale_image_ok, dry_run=args.dry_run, timeout_s=args.timeout)
    return show_and_queue(plan, args.dry_run, False, args.timeout)


def over_ssh(job: Job, site: Site, args, argv: List[str]) -> int:
    """A cluster your settings reach over SSH: checked here as far as the config goes, then the same command runs on
    its login node (cluster_train/host/remote), its output streamed."""
    from cluster_train.host.remote import commands as remote

    sending = checked(job, site, args.dry_run, args.after)
    for line in sending.warnings:
        print(f"run-cluster: {line}", file=sys.stderr)
    with shown_progress() as shown:
        reach, sent = remote.send(site, args.dry_run, sending.image, sending.data, shown)
    print(sent, flush=True)
    return remote.launch(reach, argv, sending.run_id, args.dry_run).returncode


def rerun(args) -> int:
    """The run's own cluster, profile, config and image digest; extra --set values apply on top and are recorded."""
    extra = [name for name, value in (("CLUSTER", args.cluster), ("--flavor", args.flavor),
                                      ("--first-to-start", args.first_to_start), ("--dev", args.dev)) if value]
    sub = rerun_submission(args.rerun, args.overrides, args.run_id, args.dry_run, args.stale_image_ok, extra=extra,
                           after=after_dirs(args.after))
    return show_and_queue(one_run(sub), args.dry_run, args.wait, args.timeout, args.strict_budget)


def pipeline(args, command: Optional[List[str]]) -> int:
    """`run-cluster CLUSTER --pipeline NAME`: every stage of the cluster file's pipeline checked, then queued in order,
    each after the stages it names (cluster_train/host/api/pipeline.py)."""
    refuse_options(args.cluster, pipeline_extras(args, command))
    planned = Pipeline(args.cluster, args.pipeline, overrides=args.overrides, run_id=args.run_id, dev=args.dev,
                       stale_image_ok=args.stale_image_ok)._plan(args.dry_run)
    return show_and_queue(pipeline_plan(planned), args.dry_run, False, args.timeout)


def pipeline_extras(args, command: Optional[List[str]]) -> List[str]:
    """The options given that --pipeline does not take."""
    return [name for name, value in (("PROFILE", args.profile), ("--after", args.after), ("--sweep", args.sweeps),
                                     ("--first-to-start", args.first_to_start), ("a command after --", command))
            if value]
