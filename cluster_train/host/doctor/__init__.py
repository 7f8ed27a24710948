"""`run-cluster doctor CLUSTER`: can a job run on CLUSTER from this login node? One line per check: `ok`, `warning`
or `problem`, what it found and, for the last two, the fix. Exit status 1 when any check found a problem (a job
would be refused or fail), else 0: warnings do not fail. Where it is cheap a check asks the real thing (the image
runs `true`, a user namespace is made, the scheduler's accounting is asked), so a line says what this machine does,
not what a configuration file claims.

    check.py      a check's finding (Check) and the one way the checks run a command
    cluster.py    your settings file, the cluster file's needs:, its modules, the scheduler, your account and QOS
    apptainer.py  Apptainer: found, how it starts containers unprivileged, image mounts, builds, the image run
    space.py      free space and quota where runs, images and data images are written; the images verified
    node.py       --node PROFILE: a short job on the profile's nodes (cluster_train/image/node_check.py), its table
Where your settings reach the cluster over SSH (ssh:), the same doctor runs on its login node, with your code and
settings sent as a submission sends them: what a job meets is that machine, not the laptop.
"""
from typing import Iterator, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import clusters, project, reach, settings
from cluster_train.host.clusters import Cluster
from cluster_train.host.doctor import apptainer, cluster as site_checks, node, space
from cluster_train.host.doctor.check import PROBLEM, WARNING, Check
from cluster_train.host.jobs.build import Site
from cluster_train.host.usage import Parser


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster doctor", description="check that a job can run on CLUSTER from this machine: "
                                                        "settings, modules, Apptainer, scheduler, account, space, "
                                                        "images")
    p.add_argument("cluster", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("--node", metavar="PROFILE", help="instead: a short job on that profile's nodes reports what each "
                                                     "rank sees (GPUs, driver, fabric) and an all-reduce's bandwidth")
    args = p.parse_args(argv)
    cluster = clusters.load(clusters.find(args.cluster, project.CLUSTERS))  # a bad file: check-cluster lists why
    login = over_ssh(cluster)
    if login is not None:
        return on_login_node(login, argv)
    if args.node:
        return node.run(Site.load(args.cluster), args.node)
    states = []
    for check in checks(cluster):
        print(check.line(), flush=True)  # each as it comes: an image's digest takes seconds
        states.append(check.state)
    problems, warnings = states.count(PROBLEM), states.count(WARNING)
    verdict = f"{problems} problem(s) to fix before a job can run" if problems else "a job can run from here"
    print(f"doctor {cluster.name}: {verdict} ({warnings} warning(s))")
    return 1 if problems else 0


def over_ssh(cluster: Cluster) -> Optional[reach.Reach]:
    """How your settings reach the cluster over SSH; None where they do not (or do not load: the settings check
    says why)."""
    try:
        user = settings.load(cluster.name)
    except UserError:
        return None
    return reach.of(cluster.name, user)


def on_login_node(where: reach.Reach, argv: List[str]) -> int:
    """The same doctor on the login node your settings reach: a job takes that machine's PATH, modules, scheduler
    and stores, not this one's; its checks stream back as they come."""
    from cluster_train.host.remote import commands as remote, ssh, sync

    sync.send_code(where)
    sync.send_settings(where, settings.load(where.cluster))
    print(f"doctor {where.cluster}: checked on {ssh.where(where)}, where its jobs are queued", flush=True)
    return remote.launcher(where, ["doctor", *argv]).returncode


def checks(cluster: Cluster) -> Iterator[Check]:
    said, user = site_checks.check_settings(cluster)
    yield said
    known = user or {}  # settings that did not load: the checks below run without them
    yield from site_checks.check_modules(cluster, known)
    tools = apptainer.Tools.find(site_checks.module_path(cluster, known))
    yield from apptainer.checks(tools)
    yield site_checks.check_scheduler(cluster, tools.path)
    if user is not None:  # nothing to check an account against
        yield site_checks.check_needs(cluster, user)
        yield from site_checks.check_account(cluster, user)
    site = Site(cluster, known)
    images = [space.check_image(flavor, site.image_store) for flavor in space.needed_flavors(cluster)]
    yield from space.check_space(site, [record for _, record in images if record])
    for check, record in images:
        yield check
        if record is not None and tools.exe:
            yield apptainer.check_runs(tools, record)
