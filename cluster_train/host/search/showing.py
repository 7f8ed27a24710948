"""A study as `status` and `runs` show it, read from trials.json (no Optuna needed): its progress, its best trial,
whether a driver is at work, and one line per trial."""
from pathlib import Path
from typing import Dict, List

from cluster_train.host import runs
from cluster_train.host.runs import cost
from cluster_train.host.search import record as rec


def state_of(p: Dict) -> str:
    if p["finished"] >= p["trials"] and not p["running"]:
        return "COMPLETED"
    return "RUNNING" if p["driver"] else "STOPPED"


def best_line(p: Dict) -> str:
    best = p["best"]
    if not best:
        return "no trial completed yet"
    return f"best {p['metric']} {best['value']:.6g} (trial {best['number']})"


def head(study_dir: Path) -> List[str]:
    p = rec.progress(study_dir)
    best = p["best"]
    stopped = f"no driver at work: continue it with run-cluster resume {study_dir}"
    driver = f"its driver is at work ({p['driver']})" if p["driver"] else "" if state_of(p) == "COMPLETED" else stopped
    lines = [f"study {study_dir.name}: {state_of(p)}, {p['finished']} of {p['trials']} trials finished "
             f"({p['pruned']} pruned, {p['failed']} failed), {p['running']} running; {best_line(p)}"]
    if best:
        lines.append(f"  best trial: {rec.shown_params(best['params'])}  {best['run_dir']}")
    return lines + ([f"  {driver}"] if driver else [])


def trial_lines(study_dir: Path) -> List[str]:
    trials = rec.read_trials(study_dir)
    keys = list(rec.read_record(study_dir)["spec"]["space"])
    header = ["TRIAL", "STATE", *keys, "VALUE", "EPOCHS", "RUN"]
    rows = [header] + [[str(t["number"]), t["state"], *(t["params"].get(k, "") for k in keys), value_of(t),
                        str(len(t["steps"])), relative(study_dir, t.get("run_dir"))] for t in trials]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]


def value_of(t: Dict) -> str:
    if t["state"] == "COMPLETE":
        return f"{t['value']:.6g}"
    if t.get("pruned"):
        return f"pruned: {t['pruned']['value']:.4g} (median {t['pruned']['median']:.4g})"
    return t.get("ended") or ""


def relative(study_dir: Path, run_dir) -> str:
    return str(Path(run_dir).relative_to(study_dir)) if run_dir and str(run_dir).startswith(str(study_dir)) \
        else (run_dir or "")


def status_text(study_dir: Path) -> str:
    return "\n".join(head(study_dir) + trial_lines(study_dir))


def study_row(study_dir: Path) -> Dict:
    """The study's one row in `runs`."""
    record, p = rec.read_record(study_dir), rec.progress(study_dir)
    hours = 0.0
    for trial in rec.read_trials(study_dir):
        if trial.get("run_dir") and (Path(trial["run_dir"]) / runs.MANIFEST).is_file():
            hours += cost.gpu_hours(runs.read_manifest(Path(trial["run_dir"])), Path(trial["run_dir"]))
    return {"cluster": record.get("cluster", ""), "run": record["study_id"], "state": state_of(p), "segments": "",
            "progress": f"{p['finished']}/{p['trials']} trials", "gpu-h": f"{hours:.2f}", "last": best_line(p),
            "submitted_at": record.get("submitted_at"), "dir": str(study_dir)}
