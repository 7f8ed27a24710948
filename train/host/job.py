"""Resolve "this cluster, this profile, this experiment" into one Job: every number the script needs.

The trainer's `devices` and `num_nodes` are derived here from the profile, never typed twice.
"""
import dataclasses
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from train import config as cfg
from train.errors import UserError
from train.host import images
from train.host.clusters import Cluster, Profile

LAUNCH_DEFAULT = {"slurm": "srun", "lsf": "lightning", "local": "lightning"}


@dataclass
class Job:
    run_id: str
    cluster: str
    cluster_file: str
    profile: str
    scheduler: str
    partition: str
    nodes: int
    gpus_per_node: int
    ranks_per_node: int
    tasks_per_node: int  # scheduler tasks per node: one per rank under srun/blaunch, else one
    cpus_per_task: int
    mem_gb: int
    time: str
    launch: str
    job_name: str
    run_dir: str
    config_path: str
    log_path: str
    image: str
    image_sha256: str
    image_flavor: str
    data_dir: str
    nv: bool
    binds: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    directives: List[str] = field(default_factory=list)
    account: Optional[str] = None

    @property
    def total_ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def new_run_id(cluster: str, profile: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{cluster}-{profile}-{secrets.token_hex(2)}"


def resolve(
    cluster: Cluster,
    profile: Profile,
    run: cfg.RunConfig,
    run_dir: Path,
    image: Optional[images.ImageRecord],
    image_flavor: str,
) -> Job:
    launch = profile.launch or LAUNCH_DEFAULT[cluster.scheduler]
    per_task = launch in ("srun", "blaunch")
    env = {**cluster.env, **profile.env}
    return Job(
        run_id=run_dir.name,
        cluster=cluster.name,
        cluster_file=cluster.path,
        profile=profile.name,
        scheduler=cluster.scheduler,
        partition=profile.partition,
        nodes=profile.nodes,
        gpus_per_node=profile.gpus_per_node,
        ranks_per_node=profile.ranks,
        tasks_per_node=profile.ranks if per_task else 1,
        cpus_per_task=profile.cpus_per_task,
        mem_gb=profile.mem_gb,
        time=profile.time,
        launch=launch,
        job_name=_job_name(run.name),
        run_dir=str(run_dir),
        config_path=str(run_dir / "config.yaml"),
        log_path=str(run_dir / "logs" / ("job-%j.out" if cluster.scheduler == "slurm" else "job.out")),
        image=image.path if image else "",
        image_sha256=image.sha256 if image else "",
        image_flavor=image_flavor,
        data_dir=run.data.root,
        nv=cluster.nv and profile.gpus_per_node > 0,
        binds=list(cluster.binds),
        env=env,
        directives=list(profile.directives),
    )


def apply_profile(run: cfg.RunConfig, profile: Profile, run_dir: Path, project_root: Path) -> cfg.RunConfig:
    """Force what the job shape decides onto the run config: ranks, nodes, paths."""
    trainer = {**profile.trainer, "devices": profile.ranks, "num_nodes": profile.nodes}
    overrides = {f"trainer.{k}": v for k, v in trainer.items()}
    overrides.update({f"data.{k}": v for k, v in profile.data.items()})
    overrides["output_dir"] = str(run_dir)
    data_root = Path(run.data.root)
    overrides["data.root"] = str(data_root if data_root.is_absolute() else (project_root / data_root).resolve())
    return cfg.resolve(cfg.to_dict(run), overrides)


def _job_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    if not cleaned:
        raise UserError(f"experiment name {name!r} leaves no usable job name; use letters, digits, '_', '.', '-'")
    return cleaned
