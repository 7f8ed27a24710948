"""`run-cluster report runs/<id>|sweeps/<id>`: one self-contained report.html in that directory.

A run: its curves (PNG, from its CSV logs), results, resolved config, image digest, code version, segments and
throughput. A directory of runs (a sweep; any directory whose subdirectories hold manifest.json): one table of every
run sorted by a metric, their curves overlaid, and the config keys that differ. A study (study.json, --search):
study.py's page of its best trial, Optuna's plots and every trial, each trial's run reported too. The images are
data: URIs, so the file can be mailed or copied off the cluster alone; a JSON block records how many points each curve
drew.
"""
import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.reports import curves, study
from cluster_train.host.reports.html_blocks import Images, esc, facts_table, page, section, table
from cluster_train.host.reports.run_facts import (
    Run, code_version, differing, flat, is_number, load_run, lower_is_better, short_digest, show, users_code)
from cluster_train.host.runs import cost, segments
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.jobs.user_code import shown
from cluster_train.host.search.record import is_study
from cluster_train.host.usage import Parser

REPORT = "report.html"
DEFAULT_METRIC = re.compile(r"^(best|final)_.*val")  # best_val_acc, final_val_loss, ...


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster report", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=runs.find, help="a run directory (runs/<id>, or the id), a directory of runs, or a "
                                                "study's directory")
    p.add_argument("--metric", help="the results.json metric a group is sorted by (default: the first best_*/final_* "
                                    "validation metric)")
    args = p.parse_args(argv)
    print(f"wrote {write_report(args.path, args.metric)}")
    return 0


def write_report(path: Path, metric: Optional[str] = None) -> Path:
    path = Path(path)
    if (path / runs.MANIFEST).is_file():
        run = load_run(path)
        if metric and metric not in run.metrics():
            raise unknown_metric(metric, [run])
        text = run_page(run)
    elif is_study(path):  # a study (study.json): its trials are runs in batch-N/, reported by study.py
        for run_dir in study.trial_run_dirs(path):
            write_report(run_dir)  # the study page links to each trial's own report
        text = study.study_page(path)
    else:
        members = group_members(path)
        text = group_page(path, members, choose_metric(members, metric))
    out = path / REPORT
    tmp = out.with_name(f".{REPORT}.{os.getpid()}.tmp")  # a reader never sees half a report
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out


def group_members(path: Path) -> List[Run]:
    found = sorted(p for p in path.iterdir() if (p / runs.MANIFEST).is_file()) if path.is_dir() else []
    if not found:
        raise UserError(f"{path} is neither a run directory (no {runs.MANIFEST}) nor a directory of runs; "
                        f"pass runs/<id>, or a directory holding run directories (sweeps/<id>)")
    return [load_run(p) for p in found]


def choose_metric(members: Sequence[Run], metric: Optional[str]) -> Optional[str]:
    known = list(dict.fromkeys(k for r in members for k in r.metrics()))
    if metric is None:
        return next((k for k in known if DEFAULT_METRIC.match(k)), known[0] if known else None)
    if metric not in known:
        raise unknown_metric(metric, members)
    return metric


def unknown_metric(metric: str, members: Sequence[Run]) -> UserError:
    known = list(dict.fromkeys(k for r in members for k in r.metrics()))
    if not known:
        return UserError(f"--metric {metric!r}: no run has a results.json yet (still running, or failed); "
                         f"leave --metric out until one has finished")
    return UserError(f"--metric {metric!r} is in no run's results.json; choose one of: {', '.join(known)}")


# ---- one run ---------------------------------------------------------------------------------------------------

def run_page(run: Run) -> str:
    images = Images()
    parts = [section("Run", facts_table(run_fact_rows(run))),
             section("Results", results_html(run)),
             section("Curves", run_curves(run, images)),
             section("Throughput", throughput_html(run)),
             section("Segments", segments_html(run)),
             section("Resolved config", f"<pre>{esc(config_text(run))}</pre>")]
    return page(f"Run {run.run_id}", "".join(parts), images)


def state(run: Run) -> str:
    found = segments.read(run.path)
    return (found[-1].how or "RUNNING") if found else "no segment recorded"


def run_fact_rows(run: Run) -> List[Tuple[str, object]]:
    m, image = run.manifest, run.manifest.image
    facts = [("run id", run.run_id), ("state", state(run)), ("cluster", m.cluster), ("profile", m.profile),
             ("experiment", m.experiment), ("overrides", " ".join(m.overrides) or "none"),
             ("submitted", m.submitted_at), ("image", f"{image.get('flavor')} sha256:{image.get('sha256')}"),
             ("image path", image.get("path")), ("data", m.data_version(64)), *code_rows(m),
             ("rerun of", m.rerun_of)]
    code = m.code
    if code and code.get("sha256"):
        facts.append(("code snapshot", f"sha256:{code['sha256']} of {code.get('source') or '?'}"))
    found = segments.read(run.path)
    spent = m.cost or (cost.run_cost(m, found, None, run.path) if found else None)  # status: the accounting's
    facts.append(("cost", cost.cost_line(spent).removeprefix("cost: ") if spent else None))
    return [(k, v) for k, v in facts if v not in (None, "")]


def code_rows(m: Manifest) -> List[Tuple[str, object]]:
    """The code that ran: your project's commit and dirty flag, its command and cluster-train's commit beside them
    for your own code; else cluster-train's checkout (whose tasks, or --dev snapshot, ran)."""
    git, own = m.git, users_code(m)
    launcher = f"git {git.get('commit')}" + (" (uncommitted changes)" if git.get("dirty") else "")
    if not own:
        return [("code", launcher)]
    commit = f"git {own['git_commit']}" if own.get("git_commit") else "not a git work tree"
    return [("code", f"{own.get('source') or '?'}: {commit}" + (" (uncommitted changes)" if own.get("git_dirty")
                                                                 else "")),
            ("command", shown(m.command)), ("cluster-train", launcher)]


# results.json's dicts of numbers that are one run's figures, not
# a metric per model (cluster_train/image/speed.py's throughput)
NOT_PER_MODEL = ("throughput", "input")


def results_html(run: Run) -> str:
    if not run.results:
        return '<p class="note">no results.json yet: the run is running, or ended before writing it</p>'
    metrics = run.metrics()
    facts = [(k, v) for k, v in flat(run.results).items() if k not in metrics
             and not k.startswith(("input.", "speed."))]
    return (table(["metric", "value"], list(metrics.items())) + ranked_tables(run)
            + table(["fact", "value"], facts))


def ranked_tables(run: Run) -> str:
    """A metric per model (seed 000's test_acc per video model, seed 001's best_val_acc per expert), best first:
    the seeds' final summaries."""
    out = ""
    for key, value in run.results.items():
        if key in NOT_PER_MODEL:
            continue
        if isinstance(value, dict) and len(value) > 1 and all(is_number(v) for v in value.values()):
            ranked = sorted(value.items(), key=lambda kv: kv[1], reverse=not lower_is_better(key))
            out += f"<h3>{esc(key)}, best first</h3>" + table(["#", "name", key], [(i + 1, n, v) for i, (n, v)
                                                                                   in enumerate(ranked)])
    return out


def run_curves(run: Run, images: Images) -> str:
    by_source: Dict[str, List[curves.Series]] = {}
    for s in curves.run_series(run.path):
        by_source.setdefault(s.source, []).append(s)
    if not by_source:
        return '<p class="note">no CSV log yet (metrics.csv)</p>'
    return "".join(images.img(curves.run_figure(members, source), f"curves of {source}",
                              [(".", s) for s in members]) for source, members in by_source.items())


# where cluster_train/image/speed.py says the loop read its data, in the report's words
DATA_FROM = {"directory": "directory", "image": "data image, shared", "staged": "data image, staged to the node"}


def throughput_html(run: Run) -> str:
    rows = [throughput_row(name, wait, measured, run) for name, wait, measured in input_records(run.results)]
    if not rows:
        return '<p class="note">no throughput recorded (results.json has no input figures)</p>'
    return table(["model", "steps", "compute s", "data wait s", "waited", "data from", "steps/s", "samples/s"], rows)


def input_records(results: Dict) -> List[Tuple[str, Dict, Dict]]:
    """cluster_train/image/speed.py's input and throughput figures:
    in results, or per model under results["speed"] (video_suite)."""
    found = [("", results["input"], results.get("throughput") or {})] if isinstance(results.get("input"), dict) else []
    per_model = results.get("speed") or {}
    for name, speed in (per_model.items() if isinstance(per_model, dict) else ()):  # own code's "speed" may be a number
        if isinstance(speed, dict) and isinstance(speed.get("input"), dict):
            found.append((name, speed["input"], speed.get("throughput") or {}))
    return found


def throughput_row(name: str, wait: Dict, measured: Dict, run: Run) -> Tuple:
    """Steps and samples per second: the run's own measure (the epochs after the first) where it has one, else
    worked out from its whole input figures."""
    seconds = (wait.get("compute_s") or 0) + (wait.get("data_wait_s") or 0)
    steps = wait.get("steps") or 0
    per_s = steps / seconds if seconds else None
    batch = (run.config.get("data") or {}).get("batch_size")
    ranks = run.results.get("world_size") or 1  # data.batch_size is per rank
    samples = per_s * batch * ranks if per_s and is_number(batch) else None
    samples = measured.get("samples_per_s") or samples
    waited = f"{wait['wait_fraction']:.0%}" if is_number(wait.get("wait_fraction")) else None
    return (name or run.config.get("model", {}).get("name", ""), steps, wait.get("compute_s"), wait.get("data_wait_s"),
            waited, DATA_FROM.get(wait.get("data_from"), wait.get("data_from")), per_s, samples)


def segments_html(run: Run) -> str:
    records = segments.as_records(run.path) or run.manifest.segments
    if not records:
        return '<p class="note">no segment recorded (logs/segments.jsonl)</p>'
    rows = [(r["segment"], r.get("job_id"), r.get("hosts"), r.get("start"), r.get("end"), r.get("how"),
             r.get("exit_code"), segments.resumed_text([f for f in r.get("resumed_from") or [] if "epoch" in f]))
            for r in records]
    return table(["segment", "job", "hosts", "start", "end", "how", "exit", "resumed from"], rows)


def config_text(run: Run) -> str:
    path = run.path / "config.yaml"
    return path.read_text(errors="replace") if path.is_file() else json.dumps(run.config, indent=2)


# ---- a group of runs (a sweep) -------------------------------------------------------------------------------------

def group_page(path: Path, members: List[Run], metric: Optional[str]) -> str:
    images = Images()
    ordered = sort_by(members, metric)
    keys = differing([r.config for r in members])
    order = f"sorted by {metric} ({'lower' if lower_is_better(metric) else 'higher'} is better)" if metric else \
        "no run has results yet"
    parts = [f'<p class="note">{len(members)} runs in {esc(str(path))}, {esc(order)}</p>',
             section("Runs", group_table(ordered, metric, keys)),
             section("Config keys that differ", differing_html(keys, members)),
             section("Curves", group_curves(ordered, images))]
    return page(f"Runs of {path.resolve().name}", "".join(parts), images)


def sort_by(members: List[Run], metric: Optional[str]) -> List[Run]:
    """Best first; runs without the metric (running, failed) last, by id."""
    if not metric:
        return sorted(members, key=lambda r: r.run_id)
    sign = 1 if lower_is_better(metric) else -1
    return sorted(members, key=lambda r: (metric not in r.metrics(), sign * r.metrics().get(metric, 0), r.run_id))


def group_table(ordered: List[Run], metric: Optional[str], keys: List[str]) -> str:
    names = list(dict.fromkeys(([metric] if metric else []) + [k for r in ordered for k in r.metrics()]))
    header = ["#", "run", "state", *names, *keys, "image", "code"]
    rows = [(i + 1, r.path.name, state(r), *[r.metrics().get(n) for n in names],
             *[flat(r.config).get(k) for k in keys], short_digest(r.manifest), code_version(r.manifest))
            for i, r in enumerate(ordered)]
    return table(header, rows, "runs")


def differing_html(keys: List[str], members: List[Run]) -> str:
    same = len(set(flat(members[0].config)) - set(keys) - {"output_dir"})
    if not keys:
        return f'<p class="note">none: all {len(members)} runs have the same config ({same} keys)</p>'
    return (table(["key", "values"], [(k, ", ".join(sorted({show(flat(r.config).get(k)) for r in members})))
                                      for k in keys])
            + f'<p class="note">{same} other keys are the same in every run</p>')


def group_curves(ordered: List[Run], images: Images) -> str:
    """One figure per (CSV log, column), one line per run (labelled by its directory): the runs' curves overlaid."""
    lines: Dict[Tuple[str, str], List[Tuple[str, curves.Series]]] = {}
    for run in ordered:
        for s in curves.run_series(run.path):
            lines.setdefault((s.source, s.column), []).append((run.path.name, s))
    if not lines:
        return '<p class="note">no CSV log in any run yet</p>'
    figures = "".join(images.img(curves.overlay_figure(drawn, f"{column} ({source})"), f"{column} of every run", drawn)
                      for (source, column), drawn in sorted(lines.items(), key=validation_first))
    return f'<div class="curves">{figures}</div>'  # two figures a row: a sweep has many columns


def validation_first(item) -> Tuple:
    (source, column), _ = item
    return source, not column.startswith("val"), column
