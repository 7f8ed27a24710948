"""A Job on a cluster your settings reach over SSH (`ssh:`): what needs only the config is checked here, the code,
settings, image and data image are sent, and the same request runs on its login node's bin/run-cluster, its output
captured: the API there behaves as on the login node, and prints nothing here."""
import subprocess
from dataclasses import dataclass
from typing import Any, List, Tuple

from cluster_train.shared import config as cfg
from cluster_train.host import project
from cluster_train.host.api.errors import ClusterTrainError
from cluster_train.host.api.run import Run
from cluster_train.host.api.values import After, DryRun
from cluster_train.host.jobs import user_code
from cluster_train.host.jobs.build import Site, config_of
from cluster_train.host.jobs.overrides import typed_overrides

Job = Any  # a cluster_train.host.api.job.Job, which imports this module

BANNER = " (dry run: nothing submitted) ---\n"  # ends the line the login node's dry run heads its script with


@dataclass(frozen=True)
class Remote:
    """A submission to a cluster over SSH, checked here: what the command line warns of, what goes there."""

    run_id: str
    warnings: List[str]
    image: Any  # this machine's image record of the job's flavor
    data: Any  # the data image the run names, from this machine's store; None when it names none


def checked(job: Job, site: Site, dry_run: bool, after: After = ()) -> Remote:
    """What needs only the config, checked here (the rest is checked on the login node), and this machine's image
    and data image the job needs there."""
    from cluster_train.host.data import store as data_store
    from cluster_train.host.images import store
    from cluster_train.host.jobs.build import stale_image
    from cluster_train.host.scheduling.job import new_run_id

    unsupported = [name for name, value in (("--dev", job.dev), ("a command after --", job.command),
                                            ("after=", list(after))) if value]
    if unsupported:
        refuse_over_ssh(site, ", ".join(unsupported))
    profile = site.cluster.profile(job.profile)
    run, _, _ = config_of(site, profile, job._request(job.profile, dry_run))
    run_id = job.run_id or new_run_id(site.cluster.name, job.profile)
    flavor = job.flavor or site.cluster.partition(profile.partition).image
    image = store.current(flavor, project.images_dir())  # this machine's store; `images:` of ssh settings: theirs
    warnings = stale_image(image, job.stale_image_ok)  # the cluster gets this checkout's code: the same check
    here = data_store.data_root(project.images_dir())  # this machine's data store, beside its images
    data = data_store.find(run.data.image, here) if run.data.image else None
    return Remote(run_id, warnings, image, data)


def argv(job: Job, dry_run: bool) -> List[str]:
    """The job as bin/run-cluster's arguments on the login node."""
    words = [job.cluster, job.profile, *([job.experiment] if job.experiment else [])]
    for line in cfg.setting_lines(typed_overrides(job.overrides)):  # text that the login node types back the same
        words += ["--set", line]
    for option, value in (("--flavor", job.flavor), ("--run-id", job.run_id)):
        words += [option, value] if value else []
    return words + ["--stale-image-ok"] * job.stale_image_ok + ["--dry-run"] * dry_run


def launched(job: Job, site: Site, dry_run: bool,
             after: After = ()) -> Tuple[Remote, subprocess.CompletedProcess]:
    """Sent, then run on the login node, its output captured; its refusal raised as the command line words it."""
    from cluster_train.host.remote import commands as remote

    sending = checked(job, site, dry_run, after)
    reach, _ = remote.send(site, dry_run, sending.image, sending.data)
    done = remote.launch(reach, argv(job, dry_run), sending.run_id, dry_run, capture=True)
    if done.returncode:
        raise remote.refused(reach, done)
    return sending, done


def submit(job: Job, site: Site, after: After) -> Run:
    """Queued on the login node; the Run of its record here (runs/<id>/remote.json)."""
    sending, _ = launched(job, site, False, after)
    return Run(project.run_dir_for(sending.run_id))


def dry_run(job: Job, site: Site, after: After = ()) -> DryRun:
    """The login node's dry run: its summary and script as it shows them; the config as resolved here."""
    sending, done = launched(job, site, True, after)
    summary, _, script = done.stdout.partition(BANNER)
    run, _, _ = config_of(site, site.cluster.profile(job.profile), job._request(job.profile, True))
    return DryRun(script, user_code.recorded_config(run), summary.rpartition("\n---")[0], list(sending.warnings))


def refuse_over_ssh(site: Site, what: str) -> None:
    """What does not run on a cluster reached over SSH yet, refused before anything is sent."""
    if site.user.get("ssh"):
        name = site.cluster.name
        raise ClusterTrainError(f"{what} does not run over ssh yet; run it on {name}'s login node (or drop ssh: for "
                                f"{name} from your settings)")


