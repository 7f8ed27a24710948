"""`--first-to-start`'s two forms. `run-cluster CLUSTER --first-to-start PROFILE_A PROFILE_B` races two profiles of
one cluster (cluster_train/host/runs/race.py); `run-cluster --first-to-start CLUSTER:PROFILE CLUSTER:PROFILE ...
[EXPERIMENT]` races two or more runs, each on its own cluster: this machine's scheduler, or a login node your
settings reach over SSH. Here the entries are read and every run is checked in full (over SSH: sent there with its
image, then its login node's dry run), its scheduler's commands on PATH included, before anything is queued;
cluster_train/host/remote/race.py races them."""
import dataclasses
import shutil
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host.api import over_ssh
from cluster_train.host.api.job import RACE_TIMEOUT_S, Job
from cluster_train.host.api.run import Run
from cluster_train.host.api.overrides import Overrides
from cluster_train.host.api.values import checked_number
from cluster_train.host.jobs.build import Site, build
from cluster_train.host.remote import commands as remote, race as racing
from cluster_train.host.remote import ssh
from cluster_train.host.runs.queue import Plan
from cluster_train.host.schedulers import adapter

USAGE = "run-cluster --first-to-start CLUSTER:PROFILE CLUSTER:PROFILE ... [EXPERIMENT]"


@dataclass(frozen=True)
class Entry:
    """One run of a race across clusters: a cluster (a name in clusters/ or a cluster YAML path) and its profile."""

    cluster: str
    profile: str

    @property
    def name(self) -> str:
        return f"{self.cluster}:{self.profile}"


def sort_words(args) -> None:
    """argparse's `--first-to-start` words (nargs='+' takes every word after it) sorted out in place: the two profiles
    of the one-cluster form, or the CLUSTER:PROFILE entries; the words after them go back among the positionals
    (CLUSTER, PROFILE, EXPERIMENT) where they were typed."""
    words = args.first_to_start
    if not words:
        return
    entries = len(words) if all(":" in w for w in words) else next(i for i, w in enumerate(words) if ":" not in w)
    if any(":" in w for w in words[entries:]):  # a PROFILE before or among the entries
        mixed = next(w for w in words if ":" not in w)
        raise UserError(f"--first-to-start mixes a PROFILE ({mixed!r}) with CLUSTER:PROFILE entries; name each run as "
                        f"CLUSTER:PROFILE ({USAGE})")
    if not entries and len(words) < 2:
        raise UserError(f"--first-to-start {words[0]} races nothing; name two profiles of CLUSTER (run-cluster CLUSTER "
                        f"--first-to-start PROFILE_A PROFILE_B) or two or more runs ({USAGE})")
    taken = entries or 2
    args.first_to_start, rest = words[:taken], words[taken:]
    given = [w for w in (args.cluster, args.profile, args.experiment) if w] + rest
    if len(given) > 3:
        raise UserError(f"unrecognized arguments: {' '.join(given[3:])}; see run-cluster --help")
    args.cluster, args.profile, args.experiment = (given + [None, None, None])[:3]


def across(args) -> bool:
    """Whether the command line names a race across clusters (CLUSTER:PROFILE entries)."""
    return bool(args.first_to_start) and ":" in args.first_to_start[0]


def entries_of(words: Sequence[str]) -> List[Entry]:
    """The CLUSTER:PROFILE entries of a race across clusters, refused when one lacks a half, is named twice, or stands
    alone."""
    entries = []
    for word in words:
        cluster, _, profile = word.rpartition(":")
        if not cluster or not profile:
            half = "a cluster before" if not cluster else "a profile after"
            raise UserError(f"--first-to-start {word!r}: name {half} the colon, e.g. ci-slurm:n1_gpu1 ({USAGE})")
        entry = Entry(cluster, profile)
        if entry in entries:
            raise UserError(f"--first-to-start names {word} twice; name each CLUSTER:PROFILE once")
        entries.append(entry)
    if len(entries) < 2:
        raise UserError(f"--first-to-start {words[0]} races nothing; name two or more CLUSTER:PROFILE entries "
                        f"({USAGE})")
    return entries


def experiment_of(positionals: Sequence[Optional[str]]) -> Optional[str]:
    """The one word a race across clusters takes beside its entries: the experiment (None: each profile's own)."""
    given = [w for w in positionals if w]
    if len(given) > 1:
        raise UserError(f"--first-to-start CLUSTER:PROFILE entries name each run's cluster; give only the EXPERIMENT "
                        f"beside them, not {' '.join(given)!r} ({USAGE})")
    return given[0] if given else None


def race_plan_across(words: Sequence[str], experiment: Optional[str], *, overrides: Overrides = (),
                     flavor: Optional[str] = None, dev: bool = False, stale_image_ok: bool = False, dry_run: bool,
                     timeout_s: float) -> Plan:
    """Every entry checked (each refusal one line naming its entry, all of them before anything is queued); the Plan
    that queues them all and keeps the first to start."""
    jobs = [Job(entry.cluster, entry.profile, experiment, overrides=overrides, flavor=flavor, dev=dev,
                stale_image_ok=stale_image_ok) for entry in entries_of(words)]
    prepared = contenders(jobs, dry_run)
    return Plan("\n".join(c.summary for c in prepared), [w for c in prepared for w in c.warnings],
                "--- dry run: nothing submitted ---\n", queue=lambda: racing.race_across(prepared, timeout_s),
                discard=lambda: [c.discard() for c in prepared], said=lambda lines: lines,
                run_dirs=[c.run_dir for c in prepared])


def contenders(jobs: Sequence[Job], dry_run: bool) -> List[racing.Contender]:
    """Each job checked in full as an entry of the race (CLUSTER:PROFILE), every refusal one line naming its entry,
    all of them before anything is queued."""
    prepared, errors = [], []
    for job in jobs:
        entry = Entry(job.cluster, job.profile)
        try:
            prepared.append(contender(entry, job, dry_run))
        except UserError as err:
            errors += [UserError(f"--first-to-start {entry.name}: {line}") for line in err.lines]
    if errors:
        for made in prepared:
            made.discard()
        raise_all(errors)
    return prepared


def first_to_start(jobs: Sequence[Job], *, timeout_s: float = RACE_TIMEOUT_S) -> Run:
    """Queue every job of `jobs` (each on its own cluster and profile; a cluster your settings reach over SSH through its
    login node), keep the first the scheduler starts and cancel the rest: `run-cluster --first-to-start
    CLUSTER:PROFILE CLUSTER:PROFILE ...`, with the same checks and words. Every job is checked in full before any
    is queued; waits at most `timeout_s` seconds for one to start (then all stay queued, and it raises). The
    winner's Run; its `cancelled` attribute lists the Runs of the others, and every run's manifest records the race
    (first_to_start: the winner, each one's wait). Raises ClusterTrainError, with nothing queued, on bad input."""
    checked_number("timeout_s", timeout_s, above=0)
    listed = list(jobs) if isinstance(jobs, (list, tuple)) else None
    odd = next((job for job in listed or [] if not isinstance(job, Job)), None)
    if not listed or odd is not None:
        raise UserError(f"first_to_start takes a list of ct.Job, not {odd if odd is not None else jobs!r}; e.g. "
                        f"ct.first_to_start([ct.Job(CLUSTER, PROFILE_A, ...), ct.Job(CLUSTER, PROFILE_B, ...)])")
    entries_of([Entry(job.cluster, job.profile).name for job in listed])  # two or more, each named once
    prepared, outcome = contenders(listed, dry_run=False), {}
    for i, made in enumerate(prepared):  # the race's outcome, as each run records it, kept here too
        prepared[i] = dataclasses.replace(made, record=kept(made.record, outcome))
    racing.race_across(prepared, timeout_s)
    won = next(c for c in prepared if c.run_id == outcome["winner_run"])
    winner = Run(won.run_dir)
    winner.cancelled = [Run(c.run_dir) for c in prepared if c is not won]
    return winner


def kept(record: Callable[[Dict], None], outcome: Dict) -> Callable[[Dict], None]:
    def recorded(told: Dict) -> None:
        record(told)
        outcome.update(told)
    return recorded


def contender(entry: Entry, job: Job, dry_run: bool) -> racing.Contender:
    """The entry checked in full: built here, or over SSH sent with its image and dry-run on its login node."""
    site = Site.load(entry.cluster)
    if not site.user.get("ssh"):
        if not dry_run:
            scheduler_here(site)
        return racing.here(entry.name, build(site, job._request(entry.profile, dry_run, run_id=None)))
    sending = over_ssh.checked(job, site, dry_run)
    reach, sent = remote.send(site, dry_run, sending.image, sending.data)
    argv = over_ssh.argv(job, False)
    done = remote.launch(reach, [*argv, "--dry-run"], sending.run_id, True, capture=True)
    if done.returncode:
        raise remote.refused(reach, done)
    if not dry_run:
        scheduler_there(reach, site)
    summary = done.stdout.partition(over_ssh.BANNER)[0].rpartition("\n---")[0]
    return racing.over_ssh(entry.name, reach, argv, sending.run_id, f"{sent}\n{summary}", list(sending.warnings))


# The scheduler's commands on the login node's PATH, as the launcher there finds them: the names of those missing
WHICH = "import shutil, sys; print(' '.join(c for c in sys.argv[1:] if not shutil.which(c)))"


def scheduler_here(site: Site) -> None:
    """A race queues every entry at once: a scheduler whose commands are not here is refused before any is queued
    (queuing would fail only after the entries before it were queued, and cancelled)."""
    scheduler = adapter(site.cluster.scheduler)
    missing = [command for command in scheduler.commands if not shutil.which(command)]
    if missing:
        raise UserError(f"{', '.join(missing)} not on PATH here, so no {scheduler.name} job can be queued; run the "
                        f"race where {scheduler.name}'s commands are, or load the module that brings them")


def scheduler_there(reach, site: Site) -> None:
    """The same check on a login node reached over SSH."""
    scheduler = adapter(site.cluster.scheduler)
    if not scheduler.commands:
        return
    done = ssh.run(reach, [reach.python, "-c", WHICH, *scheduler.commands], cwd=reach.remote_dir, capture=True)
    missing = done.stdout.split() if done.returncode == 0 else []
    if missing:
        raise UserError(f"{ssh.where(reach)}: {', '.join(missing)} not on PATH there, so no {scheduler.name} job can "
                        f"be queued; load the module that brings them in your login shell's startup file")
