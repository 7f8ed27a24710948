"""Sweeps: one run per combination of swept values, every one checked before anything is queued, queued as one job
array (Slurm `--array=0-N%K`, LSF `-J "name[1-N]%K"`; on `local`, at most K at once).

runs/<sweep-id>/ holds sweep.json (the swept keys and values, the elements' run directories, the array's job id),
sweep.sh (the array's script) and one run directory per element (e0, e1, ...: its own config.yaml, job.sh,
manifest.json, logs and segments), so requeue, status and reports work per element as for any run.
"""
import itertools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from train.errors import UserError, raise_all
from train.host import project, runs
from train.host.jobs import code_snapshot
from train.host.jobs.build import Submission, prepare, write_manifest, write_run
from train.host.jobs.job import new_run_id
from train.host.runs import ending
from train.host.runs.ending import EndWatch, has_ended, run_state
from train.host.runs.segments import read as read_segments
from train.host.schedulers import State, adapter

SWEEP = "sweep.json"


@dataclass
class Sweep:
    sweep_id: str
    sweep_dir: Path
    axes: List[Tuple[str, List[str]]]  # each swept key and its values, in the order given
    settings: List[Dict[str, str]]  # per element: key -> value (as typed)
    elements: List[Submission]
    cap: int
    script: str


def parse_axes(specs: List[str]) -> List[Tuple[str, List[str]]]:
    """["model.name=a,b", "optim.lr=0.1,0.01"] -> [("model.name", ["a", "b"]), ("optim.lr", ["0.1", "0.01"])]."""
    axes: Dict[str, List[str]] = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        values = [v.strip() for v in text.split(",")]
        if not sep or not key.strip() or not all(values):
            raise UserError(f"--sweep {spec!r} is not KEY=V1,V2,...; write it like --sweep optim.lr=0.1,0.01")
        if key.strip() in axes:
            raise UserError(f"--sweep {key.strip()} is given twice; list all its values in one --sweep")
        axes[key.strip()] = values
    return list(axes.items())


def read_sweep_file(path: str) -> List[Dict[str, str]]:
    """A YAML list of runs, each a mapping of config keys to values (or `runs:` holding that list), e.g.
    `- {model.name: resnet_cifar, optim.lr: 0.1}`; values as --set takes them."""
    import yaml

    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise UserError(f"--sweep-file {path}: cannot read it ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise UserError(f"--sweep-file {path} is not valid YAML ({str(err).splitlines()[0]})") from None
    listed = loaded.get("runs") if isinstance(loaded, dict) else loaded
    if not isinstance(listed, list) or not listed or not all(isinstance(r, dict) and r for r in listed):
        raise UserError(f"--sweep-file {path} must list runs, each a mapping of keys to values: "
                        f"- {{model.name: resnet_cifar, optim.lr: 0.1}}")
    return [{str(k): v if isinstance(v, str) else json.dumps(v) for k, v in run.items()} for run in listed]


def axes_of(settings: List[Dict[str, str]]) -> List[Tuple[str, List[str]]]:
    """Each key the runs set and its distinct values, in the order they first appear."""
    axes: Dict[str, List[str]] = {}
    for setting in settings:
        for key, value in setting.items():
            axes.setdefault(key, [])
            if value not in axes[key]:
                axes[key].append(value)
    return list(axes.items())


def combinations(axes: List[Tuple[str, List[str]]]) -> List[Dict[str, str]]:
    """The product of the values, the last key varying fastest."""
    keys = [key for key, _ in axes]
    return [dict(zip(keys, values)) for values in itertools.product(*(values for _, values in axes))]


def prepare_sweep(args, specs: List[str], cap: Optional[int], sweep_file: Optional[str] = None) -> Sweep:
    """Prepare and check every element (nothing is written): one bad value refuses the whole sweep, every problem
    reported at once, once."""
    if specs and sweep_file:
        raise UserError("give the runs by --sweep or by --sweep-file, not both")
    settings = read_sweep_file(sweep_file) if sweep_file else combinations(parse_axes(specs))
    axes = axes_of(settings)
    sweep_id = args.run_id or new_run_id(Path(args.cluster).stem, args.profile)
    sweep_dir = project.run_dir_for(sweep_id)
    if sweep_dir.exists():
        raise UserError(f"sweep directory {sweep_dir} already exists; choose another --run-id or remove it")
    elements, failed = [], {}  # problem line -> the settings of the elements it refused
    for i, setting in enumerate(settings):
        try:
            elements.append(prepare(args.cluster, args.profile, args.experiment, args.overrides
                                    + [f"{k}={v}" for k, v in setting.items()], None, args.flavor,
                                    dry_run=args.dry_run, run_dir=sweep_dir / f"e{i}",
                                    stale_image_ok=args.stale_image_ok, command=args.command, dev=args.dev))
        except UserError as err:
            for line in err.lines:
                failed.setdefault(line, []).append(setting)
    raise_all([UserError(blame(line, refused, len(settings))) for line, refused in failed.items()])
    scheduler = adapter(elements[0].job.scheduler)
    cap = cap or scheduler.array_cap(elements[0].job.cpus_per_task * elements[0].job.tasks_per_node)
    if cap < 1:
        raise UserError(f"--max-parallel {cap} runs nothing; give 1 or more")
    if elements[0].job.tasks:
        raise UserError(f"profile {args.profile} packs independent tasks into one job; sweep on a one-training profile")
    script = render_sweep(sweep_id, sweep_dir, elements, min(cap, len(elements)))
    return Sweep(sweep_id, sweep_dir, axes, settings, elements, min(cap, len(elements)), script)


def blame(line: str, refused: List[Dict[str, str]], count: int) -> str:
    """A problem once, with the swept values every element it refused shares (the bad value), or none when it
    refused them all (not the sweep's fault)."""
    shared = {k: v for k, v in refused[0].items() if all(s.get(k) == v for s in refused)}
    if len(refused) == count or not shared:
        return line
    return f"--sweep {' '.join(f'{k}={v}' for k, v in shared.items())}: {line}"


def shared_directives(elements: List[Submission]) -> List[str]:
    """The scheduler options of the elements' scripts, which one array shares; a sweep that changes them is refused."""
    scheduler = adapter(elements[0].job.scheduler)
    if not scheduler.directive_prefix:
        return []

    def directives(script: str) -> List[str]:
        lines = [line for line in script.splitlines() if line.startswith(scheduler.directive_prefix + " ")]
        return [line for line in lines if scheduler.option(line[len(scheduler.directive_prefix):].strip())
                not in scheduler.array_replaces]

    first = directives(elements[0].script)
    for sub in elements[1:]:
        if directives(sub.script) != first:
            raise UserError(f"the swept values change the job's scheduler options ({elements[0].job.run_id} vs "
                            f"{sub.job.run_id}); one array has one shape: sweep run-config keys only")
    return first


def render_sweep(sweep_id: str, sweep_dir: Path, elements: List[Submission], cap: int) -> str:
    from train.host.jobs.render import environment

    scheduler = adapter(elements[0].job.scheduler)
    name = elements[0].job.job_name
    directives = [*scheduler.array_directives(name, len(elements), cap, str(sweep_dir / "logs")),
                  *shared_directives(elements)]
    return environment().get_template("sweep.sh.j2").render(
        directives=directives, sweep_id=sweep_id, cap=cap, scheduler=scheduler,
        runs=[sub.job.run_dir for sub in elements], log=scheduler.array_log.format(name=name))


def queue_sweep(sweep: Sweep) -> str:
    """Write every element's run directory and the sweep's, submit the one array, record every manifest."""
    scheduler = adapter(sweep.elements[0].job.scheduler)
    (sweep.sweep_dir / "logs").mkdir(parents=True)
    try:
        for sub in sweep.elements:
            write_run(sub)
        (sweep.sweep_dir / "sweep.sh").write_text(sweep.script)
        array_id = scheduler.submit(sweep.sweep_dir / "sweep.sh", sweep.sweep_dir)
    except BaseException:
        runs.discard(sweep.sweep_dir)
        raise
    for i, (sub, setting) in enumerate(zip(sweep.elements, sweep.settings)):
        write_manifest(sub, scheduler.element_id(array_id, i),
                       sweep={"sweep_id": sweep.sweep_id, "index": i, "values": setting})
    record = {"sweep_id": sweep.sweep_id, "scheduler": scheduler.name, "array_job_id": array_id,
              "max_parallel": sweep.cap, "axes": [{"key": k, "values": v} for k, v in sweep.axes],
              "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "elements": [{"index": i, "run_dir": sub.job.run_dir, "values": setting,
                            "job_id": scheduler.element_id(array_id, i)}
                           for i, (sub, setting) in enumerate(zip(sweep.elements, sweep.settings))]}
    (sweep.sweep_dir / SWEEP).write_text(json.dumps(record, indent=2) + "\n")
    print(f"submitted {scheduler.name} array {array_id}: {len(sweep.elements)} runs, at most {sweep.cap} at once; "
          f"sweep directory {sweep.sweep_dir}")
    return array_id


def is_sweep(path: Path) -> bool:
    return (Path(path) / SWEEP).is_file()


def read_sweep(sweep_dir: Path) -> Dict:
    try:
        return json.loads((Path(sweep_dir) / SWEEP).read_text())
    except ValueError:
        raise UserError(f"{Path(sweep_dir) / SWEEP} is not valid JSON; it is damaged, restore it") from None


def element_rows(sweep_dir: Path) -> List[Dict]:
    """Per element: index, swept values, state, segments, best metric."""
    record = read_sweep(sweep_dir)
    scheduler = adapter(record["scheduler"])
    keys = [axis["key"] for axis in record["axes"]]
    rows = []
    for element in record["elements"]:
        run_dir = Path(element["run_dir"])
        job_id = runs.read_manifest(run_dir)["scheduler"]["job_id"]  # a resumed element's new job
        state = run_state(scheduler, job_id, run_dir)["state"]
        swept = {key: element["values"].get(key, "-") for key in keys}  # a sweep file's run may leave a key out
        rows.append({"element": f"e{element['index']}", **swept, "state": state.value,
                     "segments": str(len(read_segments(run_dir))), "best": best_metric(run_dir)})
    return rows


def best_metric(run_dir: Path) -> str:
    path = run_dir / "results.json"
    if not path.is_file():
        return "-"
    results = json.loads(path.read_text())
    for key, value in results.items():
        if key.startswith("best_") and isinstance(value, (int, float)):
            return f"{key} {value:.4g}"
    return "-"


def status_table(sweep_dir: Path) -> str:
    rows = element_rows(sweep_dir)
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in rows]
    record = read_sweep(sweep_dir)
    head = (f"{record['sweep_id']}: {record['scheduler']} array {record['array_job_id']}, "
            f"{len(rows)} runs, at most {record['max_parallel']} at once")
    return "\n".join([head, *(line.rstrip() for line in lines)])


def cancel(sweep_dir: Path) -> None:
    """The whole array at once (on local: the sweep script's process group, each unended element marked); each
    element still running or queued records the cancel first (train/host/runs/ending.py)."""
    record = read_sweep(sweep_dir)
    scheduler = adapter(record["scheduler"])
    unended = [(Path(e["run_dir"]), e["job_id"]) for e in record["elements"]  # elements still the array's job
               if runs.read_manifest(Path(e["run_dir"]))["scheduler"]["job_id"] == e["job_id"]
               and not has_ended(run_state(scheduler, e["job_id"], Path(e["run_dir"])))]
    if not unended:
        print(f"every element of {record['sweep_id']} has ended or been resumed; nothing to cancel")
        return
    ending.cancel(unended, lambda: scheduler.cancel_array(record["array_job_id"], Path(sweep_dir),
                                                          [e["run_dir"] for e in record["elements"]]))
    print(f"cancelled {record['scheduler']} array {record['array_job_id']} ({record['sweep_id']}, "
          f"{len(unended)} of its {len(record['elements'])} runs had not ended)")


def wait(sweep_dir: Path, timeout_s: float, poll_s: float = 2.0) -> int:
    """Until every element has ended; the table, and 0 when all completed."""
    record = read_sweep(sweep_dir)
    scheduler = adapter(record["scheduler"])
    watching = [EndWatch(scheduler, e["job_id"], Path(e["run_dir"])) for e in record["elements"]]
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        watching = [watch for watch in watching if watch.poll() is None]
        if not watching:
            break
        time.sleep(poll_s)
    rows = element_rows(sweep_dir)
    print(status_table(sweep_dir))
    return 0 if all(r["state"] == "COMPLETED" for r in rows) else 1


def show_and_queue(args, specs: List[str], cap: Optional[int], sweep_file: Optional[str] = None) -> int:
    sweep = prepare_sweep(args, specs, cap, sweep_file)
    listed = f"from {sweep_file}" if sweep_file else " x ".join(f"{k}: {', '.join(v)}" for k, v in sweep.axes)
    print(f"sweep {sweep.sweep_id}: {len(sweep.elements)} runs ({listed}), at most {sweep.cap} at once")
    print(sweep.elements[0].summary)
    for warning in dict.fromkeys(w for sub in sweep.elements for w in sub.warnings):
        print(f"run-cluster: {warning}", file=sys.stderr)
    if args.dry_run:
        for sub in sweep.elements:
            code_snapshot.discard(sub.code.snapshot if sub.code else None)
        print("--- sweep script (dry run: nothing submitted) ---")
        print(sweep.script, end="")
        return 0
    queue_sweep(sweep)
    scheduler = adapter(sweep.elements[0].job.scheduler)
    if args.wait if args.wait is not None else scheduler.follow_by_default:
        return wait(sweep.sweep_dir, args.timeout)
    return 0


def resume(args) -> int:
    """Resume every element that ended without completing, each as its own job in its own run directory; all are
    checked before any is queued. Elements still queued or running are left alone."""
    from train.host.runs.resume import prepare_resume, queue_resume

    record = read_sweep(args.run_dir)
    scheduler = adapter(record["scheduler"])
    ended = [Path(e["run_dir"]) for e in record["elements"] if ended_uncompleted(scheduler, Path(e["run_dir"]))]
    if not ended:
        print(status_table(args.run_dir))
        raise UserError(f"no element of {args.run_dir} ended without completing; nothing to resume")
    subs = [prepare_resume(run_dir, args.profile, args.overrides, args.dry_run) for run_dir in ended]
    for run_dir, sub in zip(ended, subs):
        print(f"{run_dir.name}: {sub.summary.splitlines()[0]}")
        if not args.dry_run:
            queue_resume(sub, run_dir)
    if args.dry_run:
        print(f"--- dry run: would resume {', '.join(d.name for d in ended)} ---")
    return 0


def ended_uncompleted(scheduler, run_dir: Path) -> bool:
    """Whether the element's current job (a resumed element's own) ended without completing."""
    state = run_state(scheduler, runs.read_manifest(run_dir)["scheduler"]["job_id"], run_dir)
    return has_ended(state) and state["state"] != State.COMPLETED


def print_logs(sweep_dir: Path) -> None:
    """Every element's logs, each under its name and swept values."""
    from train.host.runs.follow import _logs

    for element in read_sweep(sweep_dir)["elements"]:
        print(f"==> e{element['index']} ({' '.join(f'{k}={v}' for k, v in element['values'].items())}) <==")
        for path in _logs(Path(element["run_dir"]) / "logs"):
            print(path.read_text(errors="replace"), end="")
