"""Runs of runs: a cluster file's `pipelines:` entry, every stage checked before the first is queued, each queued to
start once the stages it names have COMPLETED (cluster_train/host/runs/after.py), and cancelled,
with that cause, if one of them ends otherwise.

A pipeline lives in the cluster file because how one stage reads another is cluster knowledge: which profiles run
the stages and where each writes (seed 001's experts are four packed tasks on Slurm, one job on LSF). A stage:

    pipelines:
      seed001:
        description: ...
        stages:
          - {name: experts, profile: experts_4x1}
          - name: fusion
            profile: fusion_4x1
            after: [experts]             # earlier stages it waits on
            set: {KEY: VALUE}            # --set values of this stage
            tasks:                       # a packed profile's task `set:` values, by task name
              resnet-multiplicativeAddition:
                task_params.experts_dir: "${run:experts}/task-1-resnet/checkpoints/resnet_cifar"

`${run:STAGE}` in a stage's values is that stage's run directory (${run:<id>}, resolved once when the job is built).
"""
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.shared.registry import unknown_name
from cluster_train.shared.yaml_file import load_yaml
from cluster_train.host.jobs.build import Request, Site, Submission, build
from cluster_train.host.jobs.overrides import Overrides, typed_overrides
from cluster_train.host.scheduling.job import new_run_id
from cluster_train.host.jobs.run_refs import Waited
from cluster_train.host.runs.queue import Plan, queue, submitted
from cluster_train.host.schedulers import adapter

STAGE_KEYS = ("name", "profile", "experiment", "after", "set", "tasks")
STAGE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Stage:
    """One run of a pipeline: a profile (and experiment) with its own values, after the stages it names."""

    name: str
    profile: str
    experiment: Optional[str] = None
    after: List[str] = field(default_factory=list)
    set: Dict[str, Any] = field(default_factory=dict)
    tasks: Dict[str, Dict[str, Any]] = field(default_factory=dict)


@dataclass
class Planned:
    """A stage built and checked: its Submission, queued by `queue_all` once the stages it waits on are queued."""

    stage: Stage
    sub: Submission


def stages(site: Site, name: str) -> List[Stage]:
    """The stages of the cluster's pipeline `name`, checked as written (each `after` an earlier stage)."""
    pipelines = load_yaml(Path(site.cluster.path), "cluster file").get("pipelines") or {}
    if not isinstance(pipelines, dict):
        raise UserError(f"{site.cluster.path}: pipelines must be a mapping (name: {{stages: [...]}})")
    if name not in pipelines:
        raise UserError(unknown_name(f"pipeline of cluster {site.cluster.name!r}", name, sorted(pipelines))
                        + f" (the pipelines: of {site.cluster.path})")
    where = f"{site.cluster.path}: pipeline {name!r}"
    written = (pipelines[name] or {}).get("stages") if isinstance(pipelines[name], dict) else None
    if not isinstance(written, list) or not written:
        raise UserError(f"{where} has no stages; give a list under stages:, e.g. - {{name: train, profile: NAME}}")
    found: List[Stage] = []
    for spec in written:
        found.append(stage_of(spec, [s.name for s in found], where))
    return found


def stage_of(spec: Any, earlier: List[str], where: str) -> Stage:
    if not isinstance(spec, dict) or not spec.get("name") or not spec.get("profile"):
        raise UserError(f"{where}: each stage is a mapping with name: and profile:, not {spec!r}")
    name = str(spec["name"])
    unknown = sorted(set(spec) - set(STAGE_KEYS))
    if unknown:
        raise UserError(f"{where}: stage {name!r} has unknown key {unknown[0]!r}; a stage takes "
                        f"{', '.join(STAGE_KEYS)}")
    if not STAGE_NAME.match(name) or name in earlier:
        raise UserError(f"{where}: stage name {name!r} must be new and lower-case letters, digits or '_'")
    after = [str(a) for a in spec.get("after") or []]
    for other in after:
        if other not in earlier:
            raise UserError(f"{where}: stage {name!r} waits on {other!r}, which is not an earlier stage "
                            f"({', '.join(earlier) or 'none'})")
    return Stage(name, str(spec["profile"]), spec.get("experiment"), after, dict(spec.get("set") or {}),
                 {str(k): dict(v or {}) for k, v in (spec.get("tasks") or {}).items()})


def plan(site: Site, name: str, overrides: Overrides = (), *, run_id: Optional[str] = None,
         dry_run: bool = False, stale_image_ok: bool = False, dev: bool = False) -> List[Planned]:
    """Every stage built and checked (each problem of each stage at once, prefixed with its stage); nothing is
    written or queued. `overrides`: --set values for every stage, after its own; `run_id`: the stages' runs are
    <run_id>-<stage> (default: time, cluster, pipeline, random suffix)."""
    base = run_id or new_run_id(site.cluster.name, name)
    run_dirs: Dict[str, Path] = {}
    planned, problems = [], []
    for stage in stages(site, name):
        run_id = f"{base}-{stage.name}"
        request = Request(stage.profile, stage.experiment, run_id=run_id, dry_run=dry_run, dev=dev,
                          stale_image_ok=stale_image_ok,
                          overrides=typed_overrides({k: fill(v, run_dirs) for k, v in stage.set.items()},
                                                    overrides),
                          awaited={run_dirs[s].name: run_dirs[s] for s in stage.after})
        try:
            sub = build(stage_site(site, stage, run_dirs), request)
        except UserError as err:
            problems += [UserError(f"stage {stage.name}: {line}") for line in err.lines]
            run_dirs[stage.name] = site.runs_root / run_id
            continue
        planned.append(Planned(stage, sub))
        run_dirs[stage.name] = Path(sub.job.work.run_dir)
    if problems:
        for done in planned:
            done.sub.discard()
    raise_all(problems)
    return planned


def fill(value: Any, run_dirs: Dict[str, Path]) -> Any:
    """A stage's value with ${run:STAGE} made that stage's run directory; other text as written."""
    if not isinstance(value, str):
        return value
    for stage, run_dir in run_dirs.items():
        value = value.replace(f"${{run:{stage}}}", str(run_dir))
    return value


def stage_site(site: Site, stage: Stage, run_dirs: Dict[str, Path]) -> Site:
    """The site with the stage's profile carrying its `tasks:` values over the profile's own task `set:` values."""
    if not stage.tasks:
        return site
    profile = site.cluster.profile(stage.profile)
    names = [str(task.get("name")) for task in profile.tasks]
    for task in stage.tasks:
        if task not in names:
            raise UserError(f"stage {stage.name}: " + unknown_name(f"task of profile {profile.name!r}", task, names))
    tasks = [{**task, "set": {**(task.get("set") or {}),
                              **{k: fill(v, run_dirs) for k, v in stage.tasks.get(str(task.get("name")), {}).items()}}}
             for task in profile.tasks]
    profiles = {**site.cluster.profiles, profile.name: dataclasses.replace(profile, tasks=tasks)}
    return dataclasses.replace(site, cluster=dataclasses.replace(site.cluster, profiles=profiles))


def queue_all(planned: List[Planned]) -> List[Waited]:
    """Queue the stages in order, each waiting on the jobs of the stages it names; the queued runs."""
    queued: Dict[str, Waited] = {}
    for step in planned:
        step.sub.after = [queued[name] for name in step.stage.after]
        job_id = queue(step.sub)
        queued[step.stage.name] = Waited(step.sub.job.run_id, job_id, str(Path(step.sub.job.work.run_dir).resolve()))
    return list(queued.values())


def pipeline_plan(planned: List[Planned]) -> Plan:
    """The command line's show-then-queue: every stage's summary, its script on a dry run."""
    summary = "\n".join(f"stage {step.stage.name}" + (f" (after {', '.join(step.stage.after)})" if step.stage.after
                                                       else "") + f":\n{step.sub.summary}" for step in planned)
    script = "".join(f"--- stage {step.stage.name}: {adapter(step.sub.job.scheduler).name} script (dry run: nothing "
                     f"submitted) ---\n{step.sub.script}" for step in planned)
    return Plan(summary, [w for step in planned for w in step.sub.warnings], script,
                queue=lambda: queue_all(planned), discard=lambda: [step.sub.discard() for step in planned],
                said=lambda queued: [submitted(step.sub, waited.job_id) for step, waited in zip(planned, queued)],
                run_dirs=[Path(step.sub.job.work.run_dir) for step in planned])
