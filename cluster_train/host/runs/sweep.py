"""Sweeps: one run per combination of swept values, every one checked before anything is queued, queued as one job
array (Slurm `--array=0-N%K`, LSF `-J "name[1-N]%K"`; on `local`, at most K at once).

runs/<sweep-id>/ holds sweep.json (the swept keys and values, the elements' run directories, the array's job id),
sweep.sh (the array's script) and one run directory per element (e0, e1, ...: its own config.yaml, job.sh,
manifest.json, logs and segments), so requeue, status and reports work per element as for any run.
"""
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import project, runs
from cluster_train.host.jobs.build import Request, Site, Submission, build
from cluster_train.host.jobs.cost import most_cost_line
from cluster_train.host.scheduling.job import new_run_id
from cluster_train.host.runs.queue import Followed, Plan, start_estimate, write_manifest, write_run
from cluster_train.host.runs.showing import show_and_queue
from cluster_train.host.runs.sweep_values import axes_of, combinations, parse_axes, read_sweep_file, texts_of
from cluster_train.host.runs.sweep_state import SWEEP, ArrayView, ended_uncompleted, read_sweep, status_table
from cluster_train.host.schedulers import adapter, serves_another


@dataclass
class Sweep:
    sweep_id: str
    sweep_dir: Path
    axes: List[Tuple[str, List[str]]]  # each swept key and its values, in the order given
    settings: List[Dict[str, Any]]  # per element: key -> its typed value (a --sweep word typed by the schema)
    shown: List[Dict[str, str]]  # the same as text: --sweep's words as typed, else the values' text form
    elements: List[Submission]
    cap: int
    chunks: List[Tuple[int, int]]  # each job array's (first element, element count): one unless the sweep is split

    def scripts(self, after: Optional[str] = None) -> List[str]:
        """Each array's script; `after`: the job id the first array waits for (a chained array's predecessor)."""
        return [render_sweep(self, first, count, after) for first, count in self.chunks]


def prepare_sweep(site: Site, base: Request, specs: List[str], sweep_file: Optional[str],
                  cap: Optional[int], axes: Optional[List[Tuple[str, List[str]]]] = None) -> Sweep:
    """Build and check every element (nothing is written): one bad value refuses the whole sweep, every problem
    reported at once, once. The cluster file and settings are read once, for all elements. `axes`: the API's
    swept keys and values, in place of --sweep's text."""
    if specs and sweep_file:
        raise UserError("give the runs by --sweep or by --sweep-file, not both")
    if cap is not None and cap < 1:
        raise UserError(f"--max-parallel {cap} runs nothing; give 1 or more")
    words = None if sweep_file or axes else combinations(parse_axes(specs))
    settings = (read_sweep_file(sweep_file) if sweep_file else combinations(axes) if axes
                else [cfg.parse_settings([f"{k}={v}" for k, v in w.items()]) for w in words])
    sweep_id = base.run_id or new_run_id(Path(site.cluster.path).stem, base.profile)
    sweep_dir = project.run_dir_for(sweep_id, site.runs_root)
    if sweep_dir.exists():
        raise UserError(f"sweep directory {sweep_dir} already exists; choose another --run-id or remove it")
    return prepare_listed(site, base, settings, cap, sweep_id, sweep_dir, shown=words)


def prepare_listed(site: Site, base: Request, settings: List[Dict[str, Any]], cap: Optional[int], sweep_id: str,
                   sweep_dir: Path, named: str = "--sweep", shown: Optional[List[Dict[str, str]]] = None) -> Sweep:
    """The runs of `settings` (each: key -> typed value) built and checked as one array in `sweep_dir`
    (a study's batch of trials is one too); `named`: the option a refused value is blamed on; `shown`: the
    settings as the user typed them (--sweep's words), else their text form."""
    shown = shown or [texts_of(setting) for setting in settings]
    limit = array_limit(site, len(settings))
    elements = build_elements(site, base, settings, shown, sweep_dir, named)
    scheduler = adapter(elements[0].job.scheduler)
    cap = cap if cap is not None else scheduler.array_cap(elements[0].job.placement.slots_per_node)
    if elements[0].job.work.tasks:
        raise UserError(f"profile {base.profile} packs independent tasks into one job; sweep on a one-training profile")
    chunks = [(first, min(limit, len(elements) - first)) for first in range(0, len(elements), limit)]
    sweep = Sweep(sweep_id, sweep_dir, axes_of(shown), settings, shown, elements, min(cap, len(elements)), chunks)
    shared_directives(elements)  # one shape for every element, whichever array it lands in
    return sweep


def array_limit(site: Site, count: int) -> int:
    """The most elements one job array holds here: the cluster file's max_array_size or the scheduler's own limit
    (Slurm's MaxArraySize as scontrol says it), whichever is lower. A larger sweep is split into arrays that fit,
    each waiting for the one before (so --max-parallel still holds), where the scheduler can chain jobs; elsewhere
    it is refused, before any element is built."""
    cluster = site.cluster
    scheduler, limit = adapter(cluster.scheduler), cluster.max_array_size
    ours = not serves_another(cluster.scheduler, cluster.scheduler_cluster or cluster.name, cluster.path)
    if ours and (not limit or count <= limit):  # asked only where it serves the cluster and the file's limit allows
        limit = min(filter(None, (limit, scheduler.array_limit())), default=None)
    if limit and count > limit and scheduler.after_directive("0") is None:
        raise UserError(f"the sweep has {count} runs and a job array on {site.cluster.name} holds at most {limit}; "
                        f"split it into sweeps of at most {limit} runs (--sweep-file) or sweep fewer values")
    return limit or count


def build_elements(site: Site, base: Request, settings: List[Dict[str, Any]], shown: List[Dict[str, str]],
                   sweep_dir: Path, named: str = "--sweep") -> List[Submission]:
    elements, failed = [], {}  # problem line -> the settings of the elements it refused, as shown
    for i, (setting, words) in enumerate(zip(settings, shown)):
        overrides = {**base.overrides, **setting}
        try:
            elements.append(build(site, replace(base, overrides=overrides, run_id=None, run_dir=sweep_dir / f"e{i}")))
        except UserError as err:
            for line in err.lines:
                failed.setdefault(line, []).append(words)
    raise_all([UserError(blame(line, refused, len(settings), named)) for line, refused in failed.items()])
    return elements


def blame(line: str, refused: List[Dict[str, str]], count: int, named: str = "--sweep") -> str:
    """A problem once, with the swept values every element it refused shares (the bad value), or none when it
    refused them all (not the sweep's fault)."""
    shared = {k: v for k, v in refused[0].items() if all(s.get(k) == v for s in refused)}
    if len(refused) == count or not shared:
        return line
    return f"{named} {' '.join(f'{k}={v}' for k, v in shared.items())}: {line}"


def shared_directives(elements: List[Submission]) -> List[str]:
    """The scheduler options of the elements' jobs, which one array shares; a sweep that changes them is refused."""
    scheduler = adapter(elements[0].job.scheduler)
    if not scheduler.directive_prefix:
        return []

    def directives(job) -> List[str]:
        return [f"{scheduler.directive_prefix} {option}" for option in scheduler.directives(job)
                if scheduler.option(option) not in scheduler.array_replaces]

    first = directives(elements[0].job)
    for sub in elements[1:]:
        if directives(sub.job) != first:
            raise UserError(f"the swept values change the job's scheduler options ({elements[0].job.run_id} vs "
                            f"{sub.job.run_id}); one array has one shape: sweep run-config keys only")
    return first


def render_sweep(sweep: "Sweep", first: int, count: int, after: Optional[str] = None) -> str:
    """One job array's script: elements first .. first + count - 1, its own index counting from 0."""
    from cluster_train.host.jobs.render import environment

    elements = sweep.elements[first:first + count]
    scheduler = adapter(elements[0].job.scheduler)
    name = elements[0].job.job_name
    directives = [*scheduler.array_directives(name, count, min(sweep.cap, count), str(sweep.sweep_dir / "logs")),
                  *([scheduler.after_directive(after)] if after else []), *shared_directives(elements)]
    return environment().get_template("sweep.sh.j2").render(
        directives=directives, sweep_id=sweep.sweep_id, cap=min(sweep.cap, count), scheduler=scheduler,
        runs=[sub.job.work.run_dir for sub in elements], log=scheduler.array_log.format(name=name))


def queue_sweep(sweep: Sweep, before_submit: Optional[Callable[[int, Path], None]] = None,
                **manifest_extra) -> List[str]:
    """Write every element's run directory and the sweep's, submit the array (or the chained arrays of a split
    sweep, each waiting for the one before), record every manifest; the arrays' job ids. `before_submit(index,
    run_dir)`: writes what else an element reads into its run directory (Executor.map's calls)."""
    scheduler = adapter(sweep.elements[0].job.scheduler)
    (sweep.sweep_dir / "logs").mkdir(parents=True)
    try:
        for i, sub in enumerate(sweep.elements):
            run_dir = write_run(sub)
            if before_submit:
                before_submit(i, run_dir)
        arrays = submit_arrays(sweep, scheduler)
    except BaseException:
        runs.discard(sweep.sweep_dir)
        raise
    job_ids = [scheduler.element_id(array["job_id"], i - array["first"])
               for array in arrays for i in range(array["first"], array["first"] + array["count"])]
    for i, (sub, setting, job_id) in enumerate(zip(sweep.elements, sweep.shown, job_ids)):
        write_manifest(sub, job_id, sweep={"sweep_id": sweep.sweep_id, "index": i, "values": setting}, **manifest_extra)
    axes = [{"key": k, "values": v} for k, v in sweep.axes]
    record = {"sweep_id": sweep.sweep_id, "scheduler": scheduler.name, "array_job_id": arrays[0]["job_id"],
              "arrays": arrays, "max_parallel": sweep.cap, "axes": axes,
              "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "elements": [{"index": i, "run_dir": sub.job.work.run_dir, "values": setting, "job_id": job_id}
                           for i, (sub, setting, job_id) in enumerate(zip(sweep.elements, sweep.shown, job_ids))]}
    (sweep.sweep_dir / SWEEP).write_text(json.dumps(record, indent=2) + "\n")
    return [array["job_id"] for array in arrays]


def submitted(sweep: Sweep, array_ids: List[str]) -> str:
    """What the command line says of a queued sweep."""
    scheduler = sweep.elements[0].job.scheduler
    return (f"submitted {scheduler} array{'s' if len(array_ids) > 1 else ''} {', '.join(array_ids)}: "
            f"{len(sweep.elements)} runs, at most {sweep.cap} at once; sweep directory {sweep.sweep_dir}")


def submit_arrays(sweep: Sweep, scheduler) -> List[Dict]:
    """sweep.sh (a split sweep: sweep.sh, sweep.1.sh, ...), each array after the one before."""
    arrays, after = [], None
    for k, (first, count) in enumerate(sweep.chunks):
        script = sweep.sweep_dir / ("sweep.sh" if k == 0 else f"sweep.{k}.sh")
        script.write_text(render_sweep(sweep, first, count, after))
        after = scheduler.submit(script, sweep.sweep_dir)
        arrays.append({"job_id": after, "first": first, "count": count})
    return arrays


def sweep_plan(site: Site, base: Request, specs: List[str], sweep_file: Optional[str], cap: Optional[int],
               axes: Optional[List[Tuple[str, List[str]]]] = None) -> Plan:
    return plan_of(prepare_sweep(site, base, specs, sweep_file, cap, axes), sweep_file)


def plan_of(sweep: Sweep, sweep_file: Optional[str] = None) -> Plan:
    listed = f"from {sweep_file}" if sweep_file else " x ".join(f"{k}: {shown(v)}" for k, v in sweep.axes)
    head = (f"sweep {sweep.sweep_id}: {len(sweep.elements)} runs ({listed}), at most {sweep.cap} at once\n"
            f"{most_cost_line(sweep.elements[0].job, len(sweep.elements))}")
    return Plan(f"{head}\n{sweep.elements[0].summary}", [w for sub in sweep.elements for w in sub.warnings],
                dry_run_text(sweep), queue=lambda: queue_sweep(sweep),
                discard=lambda: [sub.discard() for sub in sweep.elements],
                followed=lambda _: Followed(Path(sweep.sweep_dir)),
                follow_by_default=adapter(sweep.elements[0].job.scheduler).follow_by_default,
                said=lambda array_ids: [submitted(sweep, array_ids)],
                run_dirs=[Path(sub.job.work.run_dir) for sub in sweep.elements],
                start_estimate=lambda: start_estimate(sweep.elements[0].job, sweep.scripts()[0]),
                jobs=[sub.job for sub in sweep.elements])


def dry_run_text(sweep: Sweep) -> str:
    if len(sweep.chunks) == 1:
        return f"--- sweep script (dry run: nothing submitted) ---\n{sweep.scripts()[0]}"
    return "".join(f"--- sweep script {k + 1} of {len(sweep.chunks)}: e{first}-e{first + count - 1}"
                   f"{', after the array before' if k else ''} (dry run: nothing submitted) ---\n{script}"
                   for k, ((first, count), script) in enumerate(zip(sweep.chunks, sweep.scripts())))


def shown(values: List[str], most: int = 8) -> str:
    """A swept key's values for the summary line: all of a few, the ends of many."""
    if len(values) <= most:
        return ", ".join(values)
    return f"{', '.join(values[:3])}, ..., {values[-1]} ({len(values)} values)"


def resume(args) -> int:
    """Resume every element that ended without completing, each as its own job in its own run directory; all are
    checked before any is queued. Elements still queued or running are left alone."""
    from cluster_train.host.runs.resume import prepare_resume, queue_resume, resumed_line

    record = read_sweep(args.run_dir)
    scheduler = adapter(record["scheduler"])
    view = ArrayView(scheduler, record)
    ended = [Path(e["run_dir"]) for e in record["elements"] if ended_uncompleted(view, Path(e["run_dir"]))]
    if not ended:
        print(status_table(args.run_dir))
        raise UserError(f"no element of {args.run_dir} ended without completing; nothing to resume")
    site = Site.load(runs.read_manifest(ended[0]).cluster_file)  # one cluster file for every element
    subs = [prepare_resume(run_dir, args.profile, args.overrides, args.dry_run, site) for run_dir in ended]
    plan = Plan("\n".join(f"{d.name}: {sub.summary.splitlines()[0]}" for d, sub in zip(ended, subs)),
                [w for sub in subs for w in sub.warnings],
                f"--- dry run: would resume {', '.join(d.name for d in ended)} ---\n",
                queue=lambda: [print(resumed_line(sub, d, queue_resume(sub, d))) for d, sub in zip(ended, subs)],
                discard=lambda: [sub.discard() for sub in subs])
    return show_and_queue(plan, args.dry_run, False, 0)
