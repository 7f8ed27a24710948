"""A study's report.html (`run-cluster report runs/<study>`): the best trial and how to run it again, Optuna's plots
(the objective over trials, parameter importances, parallel coordinates, each trial's intermediate values), and one
row per trial linking to that trial's own run report.

The best trial and the table come from study.json and trials.json (the driver writes them), so a login node's plain
python3 still makes the page; the plots need Optuna and matplotlib, and the page says which to install where they
are missing. Optuna's matplotlib plots are drawn with pyplot and set its style globally (ggplot): each is drawn inside
an rc_context and its figure closed, so the run reports drawn in the same process keep their look."""
import io
import os
import shlex
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from cluster_train.host import runs
from cluster_train.host.reports import curves
from cluster_train.host.reports.html_blocks import Images, esc, facts_table, page, section
from cluster_train.host.search import record as rec
from cluster_train.host.search.optuna_study import storage_url

INSTALL = "python3 -m pip install --user 'optuna>=4' matplotlib"
IMPORTANCES = "plot_param_importances"
PLOTS = (("objective over trials", "plot_optimization_history"),
         ("parameter importances", IMPORTANCES),
         ("parallel coordinates", "plot_parallel_coordinate"),
         ("intermediate values per trial (pruned ones included)", "plot_intermediate_values"))


def study_page(study_dir: Path) -> str:
    study_dir = Path(os.path.abspath(study_dir))  # compared with the absolute run directories trials.json notes
    record, trials = rec.read_record(study_dir), rec.read_trials(study_dir)
    images = Images()
    parts = [section("Study", facts_table(study_facts(record, trials))),
             section("Best trial", best_html(study_dir, record, trials)),
             section("Plots", plots_html(record, images)),
             section("Trials", trials_table(study_dir, record, trials))]
    return page(f"Study {record['study_id']}", "".join(parts), images)


def trial_run_dirs(study_dir: Path) -> List[Path]:
    """The trials' run directories that exist here: report.py writes each one's report, which the table links to."""
    found = (run_dir_of(Path(study_dir), t) for t in rec.read_trials(study_dir))
    return [p for p in found if p is not None]


def run_dir_of(study_dir: Path, trial: Dict) -> Optional[Path]:
    """Where the trial's run directory is now: batch-N/eK under this study directory (a study copied off the
    cluster keeps its layout), else the absolute path the driver noted; None where neither has a manifest."""
    if not trial.get("run_dir"):
        return None
    noted = Path(trial["run_dir"])
    for path in (study_dir / noted.parent.name / noted.name, noted):
        if (path / runs.MANIFEST).is_file():
            return path
    return None


def link(study_dir: Path, trial: Dict) -> str:
    """The trial's run directory as a link to its report.html, relative so the study directory can be moved whole."""
    path = run_dir_of(study_dir, trial)
    if path is None:  # not here (yet): its path, short where it is the study's
        noted = trial.get("run_dir") or ""
        inside = noted and Path(noted).is_relative_to(study_dir)
        return esc(Path(noted).relative_to(study_dir).as_posix() if inside else noted)
    href = Path(os.path.relpath(path / "report.html", study_dir)).as_posix()
    return f'<a href="{esc(href)}">{esc(Path(os.path.relpath(path, study_dir)).as_posix())}</a>'


def study_facts(record: Dict, trials: List[Dict]) -> List[Tuple[str, object]]:
    spec = record["spec"]
    count = {s: sum(t["state"] == s for t in trials) for s in (*rec.FINISHED, "RUNNING")}
    done = (f"{sum(count[s] for s in rec.FINISHED)} of {spec['trials']} finished: {count['COMPLETE']} complete, "
            f"{count['PRUNED']} pruned, {count['FAIL']} failed; {count['RUNNING']} running")
    return [("study", record["study_id"]), ("cluster", record.get("cluster")), ("profile", record.get("profile")),
            ("experiment", record.get("experiment")), ("overrides", " ".join(record.get("overrides") or []) or "none"),
            ("objective", f"{spec['objective']['metric']}, {spec['objective']['direction']}"), ("trials", done),
            ("sampler", spec.get("sampler")), ("pruner", spec.get("pruner")), ("storage", record["storage"]["url"])]


def best_html(study_dir: Path, record: Dict, trials: List[Dict]) -> str:
    """The best completed trial, its values, and the command line that runs it again as a plain run."""
    best = rec.best(trials, rec.direction(record))
    if best is None:
        return '<p class="note">no trial has completed yet</p>'
    sets = [*(record.get("overrides") or []), *(f"{k}={v}" for k, v in best["params"].items())]
    words = [record.get(k) for k in ("cluster", "profile", "experiment")]
    command = " ".join(["run-cluster", *filter(None, words), *(f"--set {shlex.quote(s)}" for s in sets)])
    facts = [("trial", best["number"]), (record["spec"]["objective"]["metric"], f"{best['value']:.6g}"),
             *best["params"].items(), ("overrides", " ".join(sets))]
    return (facts_table(facts) + f"<p>run report: {link(study_dir, best)}</p>"
            + f"<p>run it again alone:</p><pre>{esc(command)}</pre>")


def plots_html(record: Dict, images: Images) -> str:
    """Optuna's four plots as PNGs; one line instead of a plot that would say nothing (parameter importances need two
    completed trials and two varied parameters) or that Optuna refuses, and one line for all of them without Optuna
    or matplotlib, or without the storage."""
    try:
        import matplotlib
        import optuna
    except ImportError as err:
        return f'<p class="note">no plots: {esc(err.name or "optuna")} is not installed here; {esc(INSTALL)}</p>'
    matplotlib.use("Agg")  # no display on a login node
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=record["study_id"], storage=storage_url(record))
    except Exception as err:  # a missing password variable, an unreachable database: the rest of the page helps
        return f'<p class="note">no plots: the study storage cannot be read: {esc(one_line(err))}</p>'
    shown = [plot(name, study, title, images) for title, name in PLOTS]
    return (f'<div class="curves">{"".join(shown)}</div><p class="note">parameter importances by PED-ANOVA: how much '
            f'each parameter sets the best 10% of the completed trials apart from the rest</p>')


def plot(name: str, study, title: str, images: Images) -> str:
    """One of Optuna's plots as a PNG, or the one line saying why there is none. Parameter importances by PED-ANOVA,
    not Optuna's default fANOVA: fANOVA needs scikit-learn, which INSTALL leaves out, and the page should read the
    same on a login node as on a laptop that has it."""
    import matplotlib
    import optuna
    import optuna.visualization.matplotlib as visual
    from matplotlib import pyplot

    refused = says_nothing(name, study)
    if refused:
        return f'<p class="note">no plot of {esc(title)}: {esc(refused)}</p>'
    before = set(pyplot.get_fignums())
    try:
        with matplotlib.rc_context(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna's ExperimentalWarning on every matplotlib plot
            args = {"evaluator": optuna.importance.PedAnovaImportanceEvaluator()} if name == IMPORTANCES else {}
            return images.img(png(getattr(visual, name)(study, **args).figure), title, [])
    except Exception as err:  # Optuna refuses a plot it has too few trials for
        return f'<p class="note">no plot of {esc(title)}: {esc(one_line(err))}</p>'
    finally:
        for number in set(pyplot.get_fignums()) - before:
            pyplot.close(number)


def says_nothing(name: str, study) -> Optional[str]:
    """Why a plot would mislead: Optuna 5 draws parameter importances of one completed trial as all zero, and of one
    varied parameter as all of it, rather than refusing."""
    if name != IMPORTANCES:
        return None
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if len(complete) < 2:
        return f"it needs two completed trials or more ({len(complete)} so far)"
    keys = {k for t in complete for k in t.params}
    if sum(len({repr(t.params.get(k)) for t in complete}) > 1 for k in keys) < 2:
        return "it needs two parameters or more that differ between the completed trials"
    return None


def png(fig) -> bytes:
    """The figure as PNG, cropped to what it drew: Optuna's figures cut off long parameter names otherwise."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=curves.DPI, bbox_inches="tight", pad_inches=0.1)
    return buffer.getvalue()


def one_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def trials_table(study_dir: Path, record: Dict, trials: List[Dict]) -> str:
    """html_blocks.table escapes every cell; this one's last cell is a link to the trial's run report."""
    keys = list(record["spec"]["space"])
    head = "".join(f"<th>{esc(h)}</th>" for h in ["trial", "state", *keys, "value", "epochs reported", "run"])
    rows = ""
    for t in sorted(trials, key=lambda t: t["number"]):
        cells = [t["number"], t["state"], *(t["params"].get(k, "") for k in keys), value_text(t),
                 len(t.get("steps") or {})]
        rows += ("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells)
                 + f'<td style="white-space:nowrap">{link(study_dir, t)}</td></tr>')  # batch-N/eK on one line
    return f'<table class="trials"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def value_text(t: Dict) -> str:
    """A complete trial's value; a pruned one's value where it was stopped against the median it lost to; why a
    failed one failed."""
    if t["state"] == "COMPLETE" and t.get("value") is not None:
        return f"{t['value']:.6g}"
    p = t.get("pruned")
    if p:
        return (f"pruned after epoch {p.get('epoch')}: {p['value']:.4g}, median {p['median']:.4g} of "
                f"{p.get('of_trials')} trials")
    return t.get("ended") or ""
