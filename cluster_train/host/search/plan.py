"""A study checked whole before anything is queued: the search file, the objective against what the task logs, and
every key of the space built as --set would build it at both ends of its range and at each choice (one bad value
refuses the study, every problem at once); then shown like any submission (summary, cost, budget, the first batch's
script on a dry run) and created: its directory, study.json and the Optuna storage."""
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.jobs.build import Request, Site
from cluster_train.host.jobs.cost import most_cost_line
from cluster_train.host.scheduling.job import new_run_id
from cluster_train.host.runs.queue import Plan, start_estimate
from cluster_train.host.runs.sweep import dry_run_text, prepare_listed
from cluster_train.host.search import objective, record as rec
from cluster_train.host.search.optuna_study import open_study, optuna_module
from cluster_train.host.search.spec import SearchSpec, first_metric_problem
from cluster_train.host.search.storage import storage_of


def probe_settings(spec: SearchSpec) -> List[Dict[str, Any]]:
    """Runs that try every end of every range and every choice (the other keys at their first probe), typed."""
    firsts = {p.key: p.probes()[0] for p in spec.space}
    found = [firsts]
    for p in spec.space:
        found += [{**firsts, p.key: v} for v in p.probes()[1:]]
    return found


def study_plan(site: Site, base: Request, spec: SearchSpec, cap: Optional[int], experiment: Optional[str]) -> Plan:
    """The study checked; Plan.queue creates its directory and storage (the driver queues the trials)."""
    if base.command:
        raise UserError("--search tunes an experiment's task; your own command logs no metric it knows: name an "
                        "experiment")
    if cap is not None and cap < 1:
        raise UserError(f"--max-parallel {cap} runs nothing; give 1 or more")
    optuna_module()  # refused now, not once the study exists
    study_id = base.run_id or new_run_id(Path(site.cluster.path).stem, base.profile)
    study_dir = project.run_dir_for(study_id, site.runs_root)
    if study_dir.exists():
        raise UserError(f"study directory {study_dir} already exists; choose another --run-id, or continue it: "
                        f"run-cluster resume {study_dir}")
    probes = checked_space(site, base, spec, study_id, study_dir)
    first = probes.elements[0]
    cap = min(cap or probes.cap, spec.trials)
    record = study_record(site, base, spec, cap, study_id, study_dir, first.run, experiment)
    settings = probe_settings(spec)  # the first batch, as the dry run shows it: a batch is split as a sweep is
    batch = prepare_listed(site, base, [settings[i % len(settings)] for i in range(cap)], cap, study_id,
                           study_dir / "batch-0")
    checked = probes.elements + batch.elements
    return Plan(summary(spec, record, first), [w for sub in probes.elements for w in sub.warnings]
                + warnings(spec, first.run.task),
                f"(dry run: the study's first batch; each trial takes the values the sampler draws)\n"
                f"{dry_run_text(batch)}",
                queue=lambda: discard_then(checked, lambda: create(study_dir, record)),
                discard=lambda: discard_then(checked, lambda: None),
                run_dirs=[study_dir], jobs=[first.job] * spec.trials,
                start_estimate=lambda: start_estimate(first.job, batch.scripts()[0]))


def checked_space(site: Site, base: Request, spec: SearchSpec, study_id: str, study_dir: Path):
    """Every end of the space built as the trials will be (a stale image refused as a trial's would be), and the
    objective checked against what the task logs; the probes, as a sweep."""
    probes = prepare_listed(site, base, probe_settings(spec), None, study_id, study_dir / "batch-0",
                            named="--search space")
    task = probes.elements[0].run.task
    problem = first_metric_problem(spec.metric, objective.LOGGED.get(task), task)
    if problem:
        raise UserError(problem)
    return probes


def discard_then(checked: List, then):
    """What checking the trials took (code snapshots) dropped, then `then` done: the driver builds each batch anew."""
    for sub in checked:
        sub.discard()
    return then()


def study_record(site: Site, base: Request, spec: SearchSpec, cap: int, study_id: str, study_dir: Path, run,
                 experiment: Optional[str]) -> Dict[str, Any]:
    """study.json: what was asked, so that a driver started anywhere continues the study as it was asked. `run`: the
    first trial's resolved config (its task, epochs and seed)."""
    record = {"study_id": study_id, "cluster_file": str(site.cluster.path), "cluster": site.cluster.name,
              "profile": base.profile, "experiment": experiment_path(experiment),
              "overrides": cfg.setting_lines(base.overrides),
              "flavor": base.flavor, "dev": base.dev, "stale_image_ok": base.stale_image_ok, "max_parallel": cap,
              "scheduler": site.cluster.scheduler, "task": run.task, "max_epochs": run.trainer.max_epochs,
              "spec": spec.as_dict(), "storage": storage_of(site.user, study_dir),
              "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "batches": []}
    seed = int(spec.sampler_args.get("seed", run.seed or 0))  # seeded: the file's seed, else the experiment's
    record["spec"]["sampler"] = {spec.sampler: {**spec.sampler_args, "seed": seed}}
    return record


def experiment_path(experiment: Optional[str]) -> Optional[str]:
    """A YAML path made absolute (the driver may start again from another directory); a name as given."""
    if experiment and Path(experiment).is_file():
        return str(Path(experiment).resolve())
    return experiment


def summary(spec: SearchSpec, record: Dict[str, Any], first) -> str:
    sampler = record["spec"]["sampler"][spec.sampler]
    pruner = "no pruner" if spec.pruner == "none" else f"{spec.pruner} pruner"
    return (f"study {record['study_id']}: {spec.trials} trials, {spec.sampler.upper()} sampler (seed "
            f"{sampler['seed']}), {pruner}, {spec.direction} {spec.metric}, at most {record['max_parallel']} at "
            f"once\n  space: {'; '.join(p.shown() for p in spec.space)}\n  storage: {record['storage']['url']}\n"
            f"{most_cost_line(first.job, spec.trials)}\n{first.summary}")


def warnings(spec: SearchSpec, task: str) -> List[str]:
    if spec.pruner != "none" and spec.metric not in objective.LOGGED[task]["metrics.csv"]:
        return [f"warning: {spec.metric} is only known once a trial ends, so the {spec.pruner} pruner never stops "
                f"one; name a metric logged after each validation ({', '.join(objective.LOGGED[task]['metrics.csv'])})"]
    return []


def create(study_dir: Path, record: Dict[str, Any]) -> Path:
    """The study's directory, study.json and its storage; nothing queued yet (the driver does that)."""
    study_dir.mkdir(parents=True)
    rec.write_json(study_dir / rec.STUDY, record)
    try:
        open_study(record, create=True)
    except Exception:
        import shutil

        shutil.rmtree(study_dir, ignore_errors=True)
        raise
    return study_dir


def driving_time(timeout_s: float) -> float:
    """How long a driver drives: more than 0 seconds, else the trials it queues have no driver to follow them (the
    command line's --timeout and the API's timeout_s alike, checked before anything is queued)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise UserError(f"a study driven for {timeout_s!r} s queues trials no driver follows; give --timeout "
                        f"(timeout_s= from Python) a number of seconds more than 0, e.g. 3600")
    return timeout_s


def detach(study_dir: Path, timeout_s: float) -> str:
    """The driver started in the background, its output in driver.log (a login node's `--no-wait`)."""
    import subprocess

    log = (Path(study_dir) / "driver.log").open("a")
    proc = subprocess.Popen([sys.executable, str(project.ROOT / "bin" / "run-cluster"), "resume", str(study_dir),
                             "--wait", "--timeout", str(timeout_s)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return f"the study's driver runs in the background (pid {proc.pid}); its log: {study_dir / 'driver.log'}"
