"""`run-cluster shell CLUSTER PROFILE [EXPERIMENT]`: a shell (or one command, --command) in the pinned image on the
first node of an allocation of the profile's shape, with the batch job's checks, binds, data image and environment
(allocation.py). From a laptop whose settings reach the cluster over SSH: the code and image sent as a submission
sends them, then the same command runs on the login node with this terminal attached (ssh -t)."""
import os
import signal
import sys
from typing import List

from cluster_train.host.api.job import Job
from cluster_train.host.jobs.build import Site
from cluster_train.host.usage import Parser

DESCRIPTION = ("A shell in the pinned image on a compute node, in an allocation of the profile's shape (its account, "
               "QOS, partition), with the batch job's checks, binds, data image and environment; leaving it releases "
               "the allocation. While it waits, the scheduler's pending reason and start estimate; Ctrl-C withdraws.")


def parser() -> Parser:
    p = Parser(prog="run-cluster shell", description=DESCRIPTION)
    p.add_argument("cluster", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("profile", help="a profile of that cluster: the allocation's shape")
    p.add_argument("experiment", nargs="?", help="a name in experiments/ or a YAML path (its data image and "
                                                 "environment; default: the profile's own)")
    p.add_argument("--command", metavar="CMD", help="run CMD (bash -c) instead of a shell; its exit status is ours")
    p.add_argument("--time", metavar="T", help="a shorter time limit than the profile's, in the scheduler's format")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, as for a batch job (repeatable)")
    p.add_argument("--flavor", help="image flavor (default: the one the partition needs)")
    p.add_argument("--stale-image-ok", action="store_true", help="use an image built from other code than this "
                                                                  "checkout's")
    p.add_argument("--run-id", help="name of the session's run directory (default: time, cluster, profile, suffix)")
    return p


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)
    job = Job(args.cluster, args.profile, args.experiment, overrides=args.overrides, flavor=args.flavor,
              run_id=args.run_id, stale_image_ok=args.stale_image_ok)
    site = Site.load(args.cluster)
    if site.user.get("ssh"):
        return over_ssh(job, site, argv)
    from cluster_train.host.interactive import allocation

    signal.signal(signal.SIGHUP, hung_up)
    site = allocation.shortened(site, site.cluster.profile(args.profile), args.time)  # --time, decided once
    prepared = allocation.prepare(job._submission(site, dry_run=False), site)
    for line in prepared.sub.warnings:
        print(f"run-cluster: {line}", file=sys.stderr)
    command = ["bash", "-c", args.command] if args.command else ["bash"]
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731  stdout is the session's own
    say(f"[cluster-train] session run directory {prepared.run_dir}")
    return allocation.run_session(prepared, command, os.isatty(0), say)


def hung_up(signum, frame) -> None:
    """The terminal went away (a laptop's ssh -t connection dropped): end as Ctrl-C ends, releasing the allocation."""
    raise KeyboardInterrupt


def over_ssh(job: Job, site: Site, argv: List[str]) -> int:
    """The code, settings and image sent (as a submission sends them), then `run-cluster shell` there, attached."""
    from cluster_train.host.api.over_ssh import checked
    from cluster_train.host.remote import commands as remote, ssh
    from cluster_train.host.status_line import shown_progress

    sending = checked(job, site, dry_run=False)
    for line in sending.warnings:
        print(f"run-cluster: {line}", file=sys.stderr)
    with shown_progress() as shown:
        reach, sent = remote.send(site, False, sending.image, sending.data, shown)
    print(sent, file=sys.stderr, flush=True)
    named = job.run_id is not None
    return ssh.attached(reach, [reach.python, "bin/run-cluster", "shell", *argv,
                                *([] if named else ["--run-id", sending.run_id])],
                        cwd=reach.remote_dir, env={"CT_SETTINGS": reach.settings_file})
