"""From names to a queued job: resolve the cluster, profile and experiment, check, render, then submit."""
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from train import config as cfg
from train.errors import UserError
from train.host import clusters, images, preflight, project, runs
from train.host.job import Job, apply_profile, new_run_id, resolve, task_config
from train.host.render import render
from train.host.schedulers import SCHEDULERS
from train.registry import unknown_name

DERIVED = ("trainer.devices", "trainer.num_nodes", "output_dir")


@dataclass
class Submission:
    job: Job
    run: cfg.RunConfig
    script: str
    summary: str
    experiment: str
    overrides: List[str]
    task_runs: List[cfg.RunConfig]
    rerun_of: Optional[str] = None


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


def prepare(cluster_name: str, profile_name: str, experiment: str, overrides: List[str], run_id: Optional[str],
            flavor: Optional[str], image: Optional[images.ImageRecord] = None, rerun_of: Optional[str] = None) -> Submission:
    """Everything up to submission; raises UserError (and writes nothing) on any bad input or failed check."""
    for key in cfg.parse_overrides(overrides):
        if key in DERIVED:
            raise UserError(f"{key} is derived from the cluster profile; choose another profile instead of --set {key}")
    cluster = clusters.load(clusters.find(cluster_name, project.CLUSTERS))
    profile = cluster.profile(profile_name)
    partition = cluster.partition(profile.partition)
    run_dir = (project.runs_dir() / (run_id or new_run_id(cluster.name, profile.name))).resolve()
    config_file = experiment_config(experiment)
    run = apply_profile(cfg.load(config_file, overrides), profile, run_dir)
    flavor = flavor or partition.image
    if image is None:
        image = images.current(flavor, project.images_dir())
    job = resolve(cluster, profile, run, run_dir, image, flavor)
    task_runs = [task_config(run, cluster, profile, task, i) for i, task in enumerate(job.tasks)]
    preflight.check(job, cluster, run)
    return Submission(job, run, render(job), preflight.summary(job, run), str(config_file), list(overrides),
                      task_runs, rerun_of)


def queue(sub: Submission) -> str:
    """Write the run directory, submit, record the manifest. A failed submission leaves nothing behind."""
    job = sub.job
    for run in sub.task_runs or [sub.run]:  # packed jobs run only their tasks
        for key, path in cfg.input_paths(run).items():
            if not Path(path).exists():
                fix = "create it (the generated data sets: make data)" if key == "data.root" else f"fix {key}"
                raise UserError(f"{key}: {path} does not exist; {fix}")
    run_dir = runs.create(Path(job.run_dir))
    try:
        cfg.dump(sub.run, job.config_path)
        for task, task_run in zip(job.tasks, sub.task_runs):
            Path(task.run_dir).mkdir()
            cfg.dump(task_run, task.config_path)
        (run_dir / "job.sh").write_text(sub.script)
        job_id = SCHEDULERS.build(job.scheduler).submit(run_dir / "job.sh", run_dir)
    except BaseException:
        runs.discard(run_dir)
        raise
    runs.write_manifest(job, sub.run, job_id, sub.experiment, sub.overrides, sub.rerun_of)
    print(f"submitted {job.scheduler} job {job_id}; run directory {run_dir}")
    return job_id
