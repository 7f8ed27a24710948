"""The one job builder: a `Site` (the cluster file and the user's settings, loaded once per command) and a typed
`Request` (a new run, a rerun, a resume, a sweep element, a scaling job) become one checked `Submission` (the ResolvedJob,
its script, the summary, the warnings). Nothing is written here:
cluster_train/host/runs/queue.py writes and submits it."""
import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError, UserErrors
from cluster_train.host import clusters, project, settings, undecodable
from cluster_train.host.clusters import Cluster, Profile
from cluster_train.host.clusters.flavors import known_flavor, make_image
from cluster_train.host.data import binding, directory
from cluster_train.host.images import locations, store
from cluster_train.host.images.content_key import stale_inputs
from cluster_train.host.jobs import code_snapshot, config_check, imports_check, left_out, measured, preflight, \
    run_refs, user_code
from cluster_train.host.scheduling.job import ResolvedJob, new_run_id
from cluster_train.host.jobs.render import render
from cluster_train.host.jobs.run_refs import Waited
from cluster_train.host.jobs.resolve import independent_tasks, launch_of, resolve, run_config, task_configs
from cluster_train.host.jobs.overrides import typed_overrides, user_overrides
from cluster_train.host.jobs.summary import summary as job_summary
from cluster_train.host.schedulers import adapter
from cluster_train.host.scheduling.launches import Launch
from cluster_train.shared.registry import unknown_name

DEFAULT_EXPERIMENT = "cifar100_resnet"  # where neither the command line nor the profile names one


@dataclass(frozen=True)
class Site:
    """A cluster file and the user's settings for it, read once per command and shared by every job it builds."""

    cluster: Cluster
    user: Dict[str, Any]
    checked_images: Dict[Tuple[str, bool], Any] = field(default_factory=dict, compare=False)
    experiments: Dict[Path, Dict[str, Any]] = field(default_factory=dict, compare=False)
    host_memory: Dict[str, Any] = field(default_factory=dict, compare=False)  # the runs root's peaks (measured.py)

    @classmethod
    def load(cls, name_or_path: str) -> "Site":
        undecodable.refuse("cluster", name_or_path)
        cluster = clusters.load(clusters.find(name_or_path, project.CLUSTERS))
        return cls(cluster, settings.load(cluster.name))

    @property
    def image_store(self) -> Path:
        return locations.cluster_store(self.cluster, self.user)

    @property
    def runs_root(self) -> Path:
        """Where this cluster's runs go: $CT_RUNS_DIR, your settings' `runs:`, the cluster file's (usually
        ${scratch}/...), else the checkout's runs/."""
        configured = []
        for where, value in (("your settings", self.user.get("runs")), (self.cluster.path, self.cluster.runs)):
            path = Path(settings.expand(str(value), self.user, self.cluster.name)).expanduser() if value else None
            if path and not path.is_absolute():
                raise UserError(f"runs: {value!r} in {where} is not an absolute path; write it like "
                                f"runs: ${{scratch}}/cluster-train/runs")
            configured.append(str(path) if path else None)
        return project.runs_dir(*configured)

    def runs_root_warnings(self) -> List[str]:
        """Run directories in the checkout (usually a home directory with a small quota) where the user has a
        scratch directory: sites ask that job I/O stay off home."""
        root = self.runs_root.resolve()
        if "scratch" not in self.user or not (root == project.ROOT or project.ROOT in root.parents):
            return []
        return [f"warning: runs go to {root}, inside the checkout (home quotas are small and sites keep job I/O off "
                f"them); set runs: ${{scratch}}/cluster-train/runs in {self.cluster.path} or your settings"]

    def experiment(self, path: Path) -> Dict[str, Any]:
        """An experiment file's mapping, read once per command (a sweep's elements share it); each caller gets its
        own copy to resolve."""
        if path not in self.experiments:
            self.experiments[path] = cfg.read(path)
        return copy.deepcopy(self.experiments[path])

    def stale_warnings(self, image: Optional[store.ImageRecord], allowed: bool) -> List[str]:
        """stale_image, once per image and command: a sweep's thousand elements share one image, and comparing its
        content key with the checkout's hashes every file of the cluster_train package."""
        key = (image.sha256 if image else "", allowed)
        if key not in self.checked_images:
            try:
                self.checked_images[key] = stale_image(image, allowed)
            except UserError as err:
                self.checked_images[key] = err
        found = self.checked_images[key]
        if isinstance(found, UserError):
            raise found
        return list(found)


@dataclass
class Request:
    """What one job is asked to be; the defaults are a new run of the image's own code."""

    profile: str
    experiment: Optional[str] = None  # a name in experiments/ or a YAML path; None: a command's own config
    # dotted key -> typed value: a mapping as the API gives it, or --set KEY=TEXT lines typed here once, by the
    # config schema (cluster_train/shared/config.py parse_settings); never rendered to text and read back
    overrides: Dict[str, Any] = field(default_factory=dict)
    run_id: Optional[str] = None  # default: time, cluster, profile, random suffix
    run_dir: Optional[Path] = None  # resume: continue in this existing directory
    flavor: Optional[str] = None  # default: the one the partition needs
    image: Optional[store.ImageRecord] = None  # rerun and resume: the recorded image; else the flavor's current one
    rerun_of: Optional[str] = None
    dry_run: bool = False
    stale_image_ok: bool = False
    command: Optional[List[str]] = None  # your own code, typed after --
    dev: bool = False  # this checkout's cluster_train package over the image's
    recorded_code: Optional[Dict[str, Any]] = None  # rerun and resume: the snapshot the run recorded...
    code_from: Optional[Path] = None  # ...in this run directory
    data_sha256: str = ""  # rerun and resume: the data image the run read, by digest
    after: List[Path] = field(default_factory=list)  # runs (directories or ids) that must complete before it starts
    # the runs it will wait on, by id (cluster_train/host/runs/after.py fills it from `after`; a pipeline, with its
    # earlier stages): ${run:<id>} names them, and its inputs may lie inside them
    awaited: Dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The API's values refused where they enter, named as the command line names them (its parser refuses the
        same there): bytes that are not UTF-8 (cluster_train/host/undecodable.py)."""
        for named, value in (("profile", self.profile), ("experiment", self.experiment), ("--run-id", self.run_id),
                             ("--flavor", self.flavor)):
            undecodable.refuse(named, value)
        self.overrides = typed_overrides(self.overrides)
        for word in self.command or ():
            undecodable.refuse("the command after --", word)


@dataclass
class Submission:
    job: ResolvedJob
    run: cfg.RunConfig
    script: str
    summary: str
    experiment: str
    overrides: Dict[str, Any]  # the request's, typed (the manifest records their text form)
    task_runs: List[cfg.RunConfig]
    warnings: List[str] = field(default_factory=list)
    rerun_of: Optional[str] = None
    code: Optional[user_code.Code] = None  # the snapshot of your code (a command, or --dev), else the image's own
    after: List[Waited] = field(default_factory=list)  # the runs its job waits on (cluster_train/host/runs/after.py)

    def discard(self) -> None:
        """Drop the code snapshot taken for a submission that will not be queued (a dry run)."""
        code_snapshot.discard(self.code.snapshot if self.code else None)


def build(site: Site, request: Request) -> Submission:
    """Everything up to submission, in one pass; raises UserError (and writes nothing) on any bad input or check.
    A profile made for another experiment than the one named says so first, as a warning or beside the errors."""
    profile = site.cluster.profile(request.profile)
    try:
        sub = build_on(site, profile, request)
    except UserError as err:
        mismatch = not_its_experiment(profile, request)
        if mismatch:
            raise UserErrors([UserError(mismatch), err]) from None
        raise
    sub.warnings[:0] = [f"warning: {line}" for line in filter(None, [not_its_experiment(profile, request)])]
    return sub


def build_on(site: Site, profile: Profile, request: Request) -> Submission:
    if request.after:  # the runs room checks them (they are runs); a job built here without that would not wait
        raise ValueError("Request.after is checked by cluster_train.host.runs.after.build_after, which builds the job")
    shape = launch_of(profile, adapter(site.cluster.scheduler))  # once per build: config, code and job take it
    run, user_set, config_file = config_of(site, profile, request, shape)
    code = user_code.prepare_code(run, shape, request.recorded_code, request.code_from)
    try:
        return checked(site, profile, run, user_set, code, request, config_file, shape)
    except BaseException:
        code_snapshot.discard(code.snapshot if code else None)
        raise


def config_of(site: Site, profile: Profile, request: Request,
              shape: Optional[Launch] = None) -> Tuple[cfg.RunConfig, Dict[str, Any], Optional[Path]]:
    """The run's config resolved from the experiment, the profile and every --set: the checks that need only the
    config (a cluster reached over SSH has them made on the laptop before anything is sent)."""
    cluster = site.cluster
    user_set = user_overrides(run_refs.expand_overrides(request.overrides, request.awaited, site.runs_root),
                              cluster.path)
    shape = shape or launch_of(profile, adapter(cluster.scheduler))
    run_id = request.run_id if request.run_id is not None else new_run_id(cluster.name, profile.name)
    run_dir = request.run_dir or project.run_dir_for(run_id, site.runs_root)
    named = request.experiment or (None if request.command else profile.experiment or DEFAULT_EXPERIMENT)
    config_file = experiment_config(named) if named else None
    raw = user_code.experiment_raw(site.experiment(config_file) if config_file else {}, request.command, request.dev,
                                   config_file.resolve().parent if config_file else Path.cwd())
    user_set = user_code.typed_data_root(raw, user_set)
    return run_config(raw, user_set, profile, shape, run_dir, site.user.get("tracker")), user_set, config_file


def job_of(site: Site, profile: Profile, run: cfg.RunConfig, image: Optional[store.ImageRecord],
           flavor: str, pinned_data: str, shape: Launch) -> Tuple[ResolvedJob, List[cfg.RunConfig], str]:
    """The packed tasks' configs, the ResolvedJob and its script, from a run config resolved once: the sequence a
    submission and check-cluster share. `pinned_data`: the data image digest a rerun or resume must read."""
    run_dir = Path(run.output_dir)
    tasks = independent_tasks(profile, run_dir) if shape.packed else []
    task_runs = task_configs(run, profile, tasks, site.user, site.cluster.name)
    data = binding.data_image(task_runs or [run], site.image_store, pinned_data)
    data_fields = binding.job_fields(data, run, profile, site.cluster.partition(profile.partition), site.cluster.path)
    job = resolve(site.cluster, profile, run, task_runs, run_dir, image, flavor, site.user, data_fields, shape)
    return job, task_runs, render(job)


def checked(site: Site, profile: Profile, run: cfg.RunConfig, user_set: Dict[str, Any],
            code: Optional[user_code.Code], request: Request, config_file: Optional[Path], shape: Launch) -> Submission:
    flavor = known_flavor(request.flavor or site.cluster.partition(profile.partition).image)  # before any advice
    image, warnings = request.image, []
    if image is None:  # a new run takes the current image; a rerun or resume, the one it recorded
        image = store.current(flavor, site.image_store)
        warnings = site.stale_warnings(image, request.stale_image_ok or request.dev or request.dry_run)
    warnings += site.runs_root_warnings() if request.run_dir is None else []
    pinned = request.data_sha256 if "data.image" not in user_set else ""  # a --set data.image is the user's choice
    job, task_runs, script = job_of(site, profile, run, image, flavor, pinned, shape)
    warnings += binding.staging_warnings(job, profile, site.cluster.partition(profile.partition))
    read = code.read if code else None
    ram = measured.host_ram(site, profile, run, user_set, config_file)
    warnings += preflight.check(job, site.cluster, run, task_runs, user_set, ram,
                                dry_run=request.dry_run, user_config=read, awaited=list(request.awaited.values()))
    if code and run.command:  # a package the image lacks: refused now, not after the wait in the queue
        warnings += imports_check.check(run.command, code.snapshot, job.image)
    summary = job_summary(job, run, config_check.overridden(user_set, profile), ram,
                                batch_known=not run.command or bool(read and "batch_size" in read.values),
                                snapshot=code.snapshot if code else None)
    summary = "\n".join([summary, *user_code.summary_lines(run, code), *data_lines(job, run, code, request)])
    experiment = str(config_file) if config_file else "(command line)"
    return Submission(job, run, script, summary, experiment, dict(request.overrides), task_runs, warnings,
                      request.rerun_of, code)


def data_lines(job: ResolvedJob, run: cfg.RunConfig, code: Optional[user_code.Code], request: Request) -> List[str]:
    """A command's data directory as the manifest will record it, and what its new snapshot left out because git
    ignores it (a rerun's snapshot is the recorded one: nothing of the project is read)."""
    if not run.command:
        return []
    lines = directory.summary_line(binding.manifest_record(job)) if not job.data.path else [
        f"data: image {job.data.name} sha256 {job.data.sha256[:12]} mounted read-only at {job.work.data_dir} "
        f"($CT_DATA_ROOT)"]
    if code and request.code_from is None:
        lines += left_out.summary_lines(left_out.find(Path(code.snapshot.source), run.data.root))
    return lines


def not_its_experiment(profile: Profile, request: Request) -> str:
    """A profile made for one experiment (packed tasks, a seed's shape) asked to run another by name."""
    if not profile.experiment or not request.experiment or request.run_dir or request.rerun_of:
        return ""
    if Path(request.experiment).stem == profile.experiment:
        return ""
    return (f"profile {profile.name} is made for experiment {profile.experiment}, not {request.experiment}; leave "
            f"the experiment out to run its own")


def experiment_config(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or "/" in name:
        if not path.is_file():
            raise UserError(f"experiment file {name!r} does not exist")
        return path
    path = project.EXPERIMENTS / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in project.EXPERIMENTS.glob("*.yaml"))
        raise UserError(unknown_name("experiment", name, known) + " (or the path of a YAML run config)")
    return path


def stale_image(image: Optional[store.ImageRecord], allowed: bool) -> List[str]:
    """Refuse (or, allowed, warn about) an image built from other code than this checkout's."""
    changed = stale_inputs(image, project.ROOT) if image else None
    if not changed:
        return []
    base, _, name = known_flavor(image.flavor).partition("+")  # a derived image is rebuilt on a rebuilt base
    derive = f", then bin/run-cluster images derive {name} --from {base} --requirements YOUR.lock" if name else ""
    problem = (f"the {image.flavor} image sha256:{image.sha256[:12]} was built from other code than this checkout "
               f"({changed} changed since); rebuild it ({make_image(base)}{derive})")
    if not allowed:
        raise UserError(f"{problem}, or pass --stale-image-ok to train with the image's own code")
    return [f"warning: {problem}"]
