"""`run-cluster check-cluster FILE`: a cluster file checked on its own, for whoever adds a site. Every problem of
the file at once: its schema and types, then every profile resolved and rendered as a job would be, with the checks
a profile's shape must pass, and the script handed to the scheduler's own parser where this machine has one
(`sbatch --test-only`: nothing is queued), and where that scheduler answers, the file against what it says it has
(drift: a partition gone, fewer GPUs per node than stated, a time above the limit). Only a scheduler serving the file's
cluster is asked (schedulers.serves_another): another site's answers would be wrong of this one. Run configs are left
out: any experiment may run on a profile."""
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host import clusters, project, settings
from cluster_train.host.clusters import Cluster, Profile
from cluster_train.host.jobs import preflight
from cluster_train.host.jobs.build import Site, experiment_config, job_of
from cluster_train.host.jobs.resolve import launch_of, run_config, seconds
from cluster_train.host.schedulers import adapter, serves_another
from cluster_train.host.schedulers.inventory import Inventory, LivePartition

EXPERIMENT = "demo"  # any run config renders the same directives; the smallest one
SETTING_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def check_cluster(name_or_path: str, scheduler_check: bool = True) -> Tuple[List[str], List[str]]:
    """(report lines, problem lines) for the cluster file; no problem lines means every profile passed."""
    path = clusters.find(name_or_path, project.CLUSTERS)
    try:
        cluster = clusters.load(path)
    except UserError as err:
        return [], err.lines
    site = Site(cluster, stand_in_settings(cluster, path))
    declared = cluster.scheduler_cluster or cluster.name
    elsewhere = serves_another(cluster.scheduler, declared, str(path)) if scheduler_check else ""
    scheduler_check = scheduler_check and not elsewhere  # another site's file is reviewed without its scheduler
    report, problems = [elsewhere] if elsewhere else [], []
    with tempfile.TemporaryDirectory(prefix="check-cluster-") as tmp:
        for profile in cluster.profiles.values():
            lines, found = check_profile(site, profile, Path(tmp), scheduler_check)
            report += lines
            problems += [named(line, path, profile.name) for line in found]
    live = adapter(cluster.scheduler).inventory() if scheduler_check else None
    if live is not None:
        drifted = drift(cluster, live)
        report += [] if drifted else [f"ok the file agrees with the live {cluster.scheduler}'s "
                                      f"{len(live.partitions)} partition(s)"]
        problems += drifted
    return report, problems


def named(line: str, path: Path, profile: str) -> str:
    """A profile's problem naming the file and the profile, once each."""
    line = line if f"profile {profile!r}" in line else f"profile {profile!r}: {line}"
    return line if str(path) in line else f"cluster file {path}: {line}"


def drift(cluster: Cluster, live: Inventory) -> List[str]:
    """Where the file states more than the live scheduler has: a partition gone, more GPUs, cores, memory or nodes
    than its nodes have, a profile's time limit above the partition's (jobs the scheduler would refuse or hold)."""
    found = {part.name: part for part in live.partitions}
    problems = []
    for entry in cluster.partitions.values():
        name = entry.scheduler_name
        if not name:  # the site's default partition: whichever it is, nothing to compare by name
            continue
        if name not in found:
            problems.append(f"partition {entry.name!r}: the scheduler has no partition {name!r} (it has "
                            f"{', '.join(found)}); fix its name (partition:) or remove the entry")
            continue
        problems += [f"partition {entry.name!r} states {key} {stated} but the scheduler's {name} nodes have {has}; "
                     f"set {key}: {has}" for key, stated, has in (
                         ("gpus_per_node", entry.gpus_per_node, found[name].gpus_per_node),
                         ("cpus_per_node", entry.cpus_per_node, found[name].cores_per_node),
                         ("mem_per_node_gb", entry.mem_per_node_gb, found[name].mem_per_node_gb),
                         ("nodes", entry.nodes, found[name].nodes)) if stated is not None and stated > has]
        problems += too_long(cluster, entry.name, found[name])
    return problems


def too_long(cluster: Cluster, entry: str, part: LivePartition) -> List[str]:
    scheduler = adapter(cluster.scheduler)
    limit = seconds(scheduler, part.max_time) or 0  # the live scheduler's limit, in its own words
    return [f"profile {p.name!r}: time {p.time} is above partition {part.name}'s limit {part.max_time}; shorten it"
            for p in cluster.profiles.values()
            if limit and p.partition == entry and (seconds(scheduler, p.time) or 0) > limit]


def check_profile(site: Site, profile: Profile, tmp: Path, scheduler_check: bool) -> Tuple[List[str], List[str]]:
    cluster = site.cluster
    try:
        if profile.experiment:
            experiment_config(profile.experiment)  # the experiment it is made for exists
        shape = launch_of(profile, adapter(cluster.scheduler))
        run = run_config(cfg.read(project.EXPERIMENTS / f"{EXPERIMENT}.yaml"), {}, profile, shape, tmp / profile.name)
        job, _, script = job_of(site, profile, run, None, cluster.partition(profile.partition).image, "", shape)
    except UserError as err:
        return [], err.lines
    found = [line for err in preflight.failures(preflight.CLUSTER_RULES, job, cluster, run) for line in err.lines]
    found += [line for err in preflight.directives_repeated(job) for line in err.lines]
    if found:
        return [], found
    (tmp / f"{profile.name}.sh").write_text(script)
    verdict = job.adapter.test_script(tmp / f"{profile.name}.sh") if scheduler_check else None
    if verdict is None:
        return [f"ok {profile.name}: rendered and checked (no {cluster.scheduler} of this cluster here to parse the "
                f"script)"], []
    accepted, said = verdict
    if not accepted:
        return [], [f"{cluster.scheduler} on this machine refuses the script: {said}"]
    return [f"ok {profile.name}: rendered, checked, and {cluster.scheduler} accepts it ({said})"], []


def stand_in_settings(cluster: Cluster, path: Path) -> Dict[str, str]:
    """The user's settings for the cluster, with a stand-in for each one the file needs or refers to and the
    user has not set: a site maintainer checks a file without being one of its users."""
    user = settings.load(cluster.name)
    wanted = set(cluster.needs) | set(SETTING_REFERENCE.findall(path.read_text()))
    return {**{key: f"check-cluster-{key}" for key in wanted}, **user}
