"""From names to a queued job: resolve the cluster, profile and experiment, check, render, then submit."""
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from train import config as cfg
from train.errors import UserError
from train.host import clusters, project, runs, settings
from train.host.images import locations, store
from train.host.images.content_key import stale_inputs
from train.host.jobs import code_snapshot, config_check, preflight, user_code
from train.host.jobs.job import Job, independent_tasks, new_run_id, resolve, run_config, task_configs
from train.host.jobs.render import render
from train.host.schedulers import adapter
from train.registry import unknown_name

DERIVED = ("trainer.devices", "trainer.num_nodes", "output_dir")
PROFILE_KEYS = {f.name for f in dataclasses.fields(clusters.Profile)} - {"name", "trainer", "data", "description"}


@dataclass
class Submission:
    job: Job
    run: cfg.RunConfig
    script: str
    summary: str
    experiment: str
    overrides: List[str]
    task_runs: List[cfg.RunConfig]
    warnings: List[str] = field(default_factory=list)
    rerun_of: Optional[str] = None
    code: Optional[user_code.Code] = None  # the snapshot of your code (a command, or --dev), else the image's own


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


def user_overrides(overrides: List[str], cluster_file: str) -> Dict[str, Any]:
    """--set values, refusing the keys a profile decides: a job setting belongs to the cluster file."""
    parsed = cfg.parse_overrides(overrides)
    for key in parsed:
        if key in DERIVED:
            raise UserError(f"{key} is derived from the cluster profile; choose another profile instead of --set {key}")
        if key in PROFILE_KEYS:
            raise UserError(f"--set {key}: {key} is a job setting of the cluster profile, not of the run config; "
                            f"choose another profile or edit it in {cluster_file}")
    return parsed


def prepare(cluster_name: str, profile_name: str, experiment: Optional[str], overrides: List[str],
            run_id: Optional[str], flavor: Optional[str], image: Optional[store.ImageRecord] = None,
            rerun_of: Optional[str] = None, dry_run: bool = False, run_dir: Optional[Path] = None,
            stale_image_ok: bool = False, command: Optional[List[str]] = None, dev: bool = False,
            recorded_code: Optional[Dict[str, Any]] = None, code_from: Optional[Path] = None) -> Submission:
    """Everything up to submission, in one pass; raises UserError (and writes nothing) on any bad input or check.
    `command` (typed after --) and `dev` run code other than the image's; `code_from` is the run directory whose
    recorded snapshot a rerun or resume runs again."""
    cluster = clusters.load(clusters.find(cluster_name, project.CLUSTERS))
    user_set = user_overrides(overrides, cluster.path)
    profile = cluster.profile(profile_name)
    partition = cluster.partition(profile.partition)
    user = settings.load(cluster.name)
    if run_dir is None:  # a new run; `resume` continues an existing one in its own directory
        run_dir = project.run_dir_for(run_id if run_id is not None else new_run_id(cluster.name, profile.name))
    config_file = experiment_config(experiment) if experiment else None
    raw = user_code.experiment_raw(cfg.read(config_file) if config_file else {}, command, dev,
                                   config_file.resolve().parent if config_file else Path.cwd())
    run = run_config(raw, user_set, profile, run_dir)
    code = user_code.prepare_code(run, profile.launch, recorded_code, code_from)
    try:
        return checked_submission(cluster, profile, partition, user, user_set, run, run_dir, code, image, flavor,
                                  dry_run, stale_image_ok or dev, overrides, config_file, rerun_of)
    except BaseException:
        code_snapshot.discard(code.snapshot if code else None)
        raise


def checked_submission(cluster, profile, partition, user, user_set, run, run_dir, code, image, flavor, dry_run,
                       stale_image_ok, overrides, config_file, rerun_of) -> Submission:
    tasks = independent_tasks(profile, run_dir) if profile.launch == "independent" else []
    task_runs = task_configs(run, profile, tasks, user, cluster.name)
    flavor = flavor or partition.image
    stale = []
    if image is None:  # a new run takes the current image; a rerun or resume, the one it recorded
        image = store.current(flavor, locations.cluster_store(cluster, user))
        stale = stale_image(image, stale_image_ok or dry_run)
    job = resolve(cluster, profile, run, task_runs, run_dir, image, flavor, user)
    script = render(job)
    read = code.read if code else None
    warnings = stale + preflight.check(job, cluster, run, task_runs, user_set, script, missing_image_ok=dry_run,
                                       user_config=read)
    summary = preflight.summary(job, run, config_check.overridden(user_set, profile),
                                batch_known=not run.command or bool(read and "batch_size" in read.values))
    summary = "\n".join([summary, *user_code.summary_lines(run, code)])
    experiment = str(config_file) if config_file else "(command line)"
    return Submission(job, run, script, summary, experiment, list(overrides), task_runs, warnings, rerun_of, code)


def stale_image(image: Optional[store.ImageRecord], allowed: bool) -> List[str]:
    """Refuse (or, allowed, warn about) an image built from other code than this checkout's."""
    changed = stale_inputs(image, project.ROOT) if image else None
    if not changed:
        return []
    base, _, name = image.flavor.partition("+")  # a derived image (cpu+myproject) is rebuilt on a rebuilt base
    derive = f", then bin/run-cluster images derive {name} --from {base} --requirements YOUR.lock" if name else ""
    problem = (f"the {image.flavor} image sha256:{image.sha256[:12]} was built from other code than this checkout "
               f"({changed} changed since); rebuild it (make image FLAVOR={base}{derive})")
    if not allowed:
        raise UserError(f"{problem}, or pass --stale-image-ok to train with the image's own code")
    return [f"warning: {problem}"]


def queue(sub: Submission) -> str:
    """Write the run directory, submit, record the manifest. A failed submission leaves nothing behind."""
    job = sub.job
    run_dir = write_run(sub)
    try:
        job_id = adapter(job.scheduler).submit(run_dir / "job.sh", run_dir)
    except BaseException:
        runs.discard(run_dir)
        raise
    write_manifest(sub, job_id)
    print(f"submitted {job.scheduler} job {job_id}; run directory {run_dir}")
    return job_id


def write_run(sub: Submission) -> Path:
    """The run directory with its config(s), code snapshot and job.sh; removed again if writing fails."""
    job = sub.job
    run_dir = runs.create(Path(job.run_dir))
    try:
        if sub.code:
            code_snapshot.place(sub.code.snapshot, run_dir)
        cfg.dump(sub.run, job.config_path)
        for task, task_run in zip(job.tasks, sub.task_runs):
            Path(task.run_dir).mkdir()
            cfg.dump(task_run, task.config_path)
        (run_dir / "job.sh").write_text(sub.script)
    except BaseException:
        runs.discard(run_dir)
        raise
    return run_dir


def write_manifest(sub: Submission, job_id: str, **extra) -> None:
    runs.write_manifest(sub.job, sub.run, job_id, sub.experiment, sub.overrides, sub.rerun_of,
                        sub.code.snapshot.record() if sub.code else None, **extra)
