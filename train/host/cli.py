"""`bin/run-cluster`: resolve, check, render and submit a training job, or rerun a recorded one.

argparse rather than fire: `--set` repeats, and fire cannot take a repeated flag.
"""
import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional

from train import config as cfg
from train.errors import UserError
from train.host import clusters, images, preflight, project, runs
from train.host.job import apply_profile, new_run_id, resolve
from train.host.render import render
from train.host.schedulers import SCHEDULERS, wait
from train.registry import unknown_name

DEFAULT_EXPERIMENT = "cifar100_resnet"
DERIVED = ("trainer.devices", "trainer.num_nodes", "output_dir")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run-cluster",
        description="Render, check and submit a training job: run-cluster CLUSTER PROFILE [EXPERIMENT].",
    )
    p.add_argument("cluster", nargs="?", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("profile", nargs="?", help="a profile of that cluster")
    p.add_argument("experiment", nargs="?", default=DEFAULT_EXPERIMENT, help="a name in experiments/ or a YAML path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set trainer.max_epochs=5 (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved job and its script; submit nothing")
    p.add_argument("--rerun", metavar="RUN_DIR", help="submit again with the same config and image digest")
    p.add_argument("--run-id", help="name of the run directory (default: time, cluster, profile, random suffix)")
    p.add_argument("--wait", dest="wait", action="store_true", default=None, help="wait for the job, following its log")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="return once the job is queued")
    p.add_argument("--timeout", type=float, default=24 * 3600, help="seconds --wait waits at most")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.rerun:
            return rerun(args)
        if not args.cluster or not args.profile:
            raise UserError("name a cluster and a profile: run-cluster CLUSTER PROFILE [EXPERIMENT] (or --rerun runs/<id>)")
        return submit(args, args.cluster, args.profile, experiment_config(args.experiment), args.overrides)
    except UserError as err:
        print(f"run-cluster: error: {err}", file=sys.stderr)
        return 2


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


def submit(args, cluster_name: str, profile_name: str, experiment: Path, overrides: List[str],
           image: Optional[images.ImageRecord] = None, rerun_of: Optional[str] = None) -> int:
    for key in cfg.parse_overrides(overrides):
        if key in DERIVED:
            raise UserError(f"{key} is derived from the cluster profile; choose another profile instead of --set {key}")
    cluster = clusters.load(clusters.find(cluster_name, project.CLUSTERS))
    profile = cluster.profile(profile_name)
    partition = cluster.partition(profile.partition)
    run_dir = (project.runs_dir() / (args.run_id or new_run_id(cluster.name, profile.name))).resolve()
    run = apply_profile(cfg.load(experiment, overrides), profile, run_dir, project.ROOT)
    if image is None:
        image = images.current(partition.image, project.images_dir())
    job = resolve(cluster, profile, run, run_dir, image, image.flavor if image else partition.image)
    preflight.check(job, cluster, run)
    script = render(job)
    print(preflight.summary(job, run))
    if args.dry_run:
        print(f"--- {job.scheduler} script (dry run: nothing submitted) ---")
        print(script, end="")
        return 0
    if not Path(run.data.root).exists():
        raise UserError(f"data directory {run.data.root} does not exist; create it (demo data: make data)")
    return queue(args, job, run, script, experiment, overrides, rerun_of)


def queue(args, job, run, script: str, experiment: Path, overrides, rerun_of) -> int:
    run_dir = runs.create(Path(job.run_dir))
    try:
        cfg.dump(run, job.config_path)
        (run_dir / "job.sh").write_text(script)
        scheduler = SCHEDULERS.build(job.scheduler)
        job_id = scheduler.submit(run_dir / "job.sh", run_dir)
    except BaseException:
        runs.discard(run_dir)
        raise
    runs.write_manifest(job, run, job_id, str(experiment), overrides, rerun_of)
    print(f"submitted {job.scheduler} job {job_id}; run directory {run_dir}")
    if args.wait if args.wait is not None else job.scheduler == "local":
        return follow(scheduler, job_id, run_dir, args.timeout)
    return 0


def follow(scheduler, job_id: str, run_dir: Path, timeout_s: float) -> int:
    """Wait for the job, echoing its log as it grows; the exit status is the job's."""
    import threading

    done = threading.Event()
    printer = threading.Thread(target=_tail, args=(run_dir / "logs", done), daemon=True)
    printer.start()
    state = wait(scheduler, job_id, run_dir, timeout_s)
    time.sleep(0.5)
    done.set()
    printer.join()
    print(f"job {job_id} {state['state']}; results in {run_dir}")
    return 0 if state["state"] == "COMPLETED" else 1


def _tail(logs: Path, done) -> None:
    position, path = 0, None
    while True:
        finished = done.is_set()
        if path is None:
            found = sorted(logs.glob("job*.out"))
            path = found[0] if found else None
        if path is not None:
            with path.open() as f:
                f.seek(position)
                chunk = f.read()
                position = f.tell()
            if chunk:
                print(chunk, end="", flush=True)
        if finished:
            return
        time.sleep(0.5)


def rerun(args) -> int:
    manifest = runs.read_manifest(Path(args.rerun))
    record = images.find(manifest["image"]["sha256"], project.images_dir())
    if record is None or images.sha256_file(record.path) != manifest["image"]["sha256"]:
        raise UserError(
            f"the image of {args.rerun} (sha256 {manifest['image']['sha256']}) is no longer in "
            f"{project.images_dir()}/store; restore it there to rerun exactly"
        )
    # The run's config.yaml already holds every override it was submitted with.
    config_file = Path(args.rerun) / "config.yaml"
    return submit(args, manifest["cluster_file"], manifest["profile"], config_file, [], image=record,
                  rerun_of=manifest["run_id"])
