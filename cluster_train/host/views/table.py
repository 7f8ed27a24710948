"""`run-cluster runs [--cluster C] [--state S] [--json]`: one table of every run, wherever it lives: the runs in this
machine's run roots (their state from their scheduler), and the runs on each cluster your settings reach over SSH,
asked there (its own `runs --json`) over the shared connections, all clusters at once. A cluster that does not
answer is one row saying so; the others are still shown."""
import csv
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.runs import cost, ending, failures, metrics, segments
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.usage import Parser

COLUMNS = ("cluster", "run", "state", "segments", "progress", "gpu-h", "last", "age")
CUT = COLUMNS.index("last")  # the one column cut to the terminal's width: the others are short, or keys (run ids)
CAUSE_WIDTH = 80  # an unreachable cluster's row: the table stays within a terminal's width
ELLIPSIS = "..."  # where a cell was cut (ASCII: a terminal of any encoding prints it)


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)
    rows = run_rows(args.cluster, args.state, args.here)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(table(rows, terminal_width()) if rows else "no runs")
    return 0


def parser() -> Parser:
    p = Parser(prog="run-cluster runs", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", help="only this cluster's runs")
    p.add_argument("--state", help="only runs in this state (RUNNING, PENDING, COMPLETED, FAILED, ...)")
    p.add_argument("--json", action="store_true", help="one JSON object per run (what a laptop asks a cluster)")
    p.add_argument("--here", action="store_true", help="only this machine's runs: no cluster asked over SSH")
    return p


def run_rows(cluster: Optional[str] = None, state: Optional[str] = None, here: bool = False) -> List[Dict]:
    """Every run's row (this machine's; each cluster's over SSH unless `here`), of one cluster and in one state if
    named; a cluster that did not answer is one UNREACHABLE row, whatever the state asked."""
    return in_state(local_rows(cluster) + ([] if here else remote_rows(cluster)), state)


def in_state(rows: List[Dict], state: Optional[str]) -> List[Dict]:
    """The rows in `state` (any case), and every UNREACHABLE one: a cluster that did not answer may hold such runs."""
    return [r for r in rows if not state or r["state"].upper() in (state.upper(), "UNREACHABLE")]


def local_rows(cluster: Optional[str]) -> List[Dict]:
    from cluster_train.host.runs import run_roots
    from cluster_train.host.search.showing import study_row

    manifests = [m for root in run_roots() if root.is_dir() for m in sorted(root.glob("*/manifest.json"))
                 + sorted(root.glob("*/e*/manifest.json"))]  # sweeps: one row per element
    rows = [row_of(m.parent, Manifest(json.loads(m.read_text()), m)) for m in manifests
            if not (m.parent / "remote.json").exists()]  # a copy fetched for a report: the cluster's row says it
    studies = [study_row(s.parent) for root in run_roots() if root.is_dir() for s in sorted(root.glob("*/study.json"))]
    rows += [{**row, "age": age(row.pop("submitted_at"))} for row in studies]  # a study: one row, its trials inside
    return [r for r in rows if not cluster or r["cluster"] == cluster]


def row_of(run_dir: Path, manifest: Manifest) -> Dict:
    job_id = manifest.job_id
    said: Dict = {}
    try:
        said = ending.run_state(manifest.adapter, job_id, run_dir)
        state = said["state"].value
    except Exception as err:  # a scheduler this machine cannot ask (its commands missing): the row says so
        state = f"UNKNOWN ({str(err).splitlines()[0][:40]})" if str(err) else "UNKNOWN"
    done, last = progress_of(run_dir, manifest)
    return {"cluster": manifest.cluster, "run": manifest.run_id,
            "state": state, "segments": len(segments.read(run_dir)), "progress": done,
            "gpu-h": f"{cost.gpu_hours(manifest, run_dir):.2f}",
            "last": failures.of_failed(run_dir, state) or pending(said) or last,
            "age": age(manifest.submitted_at), "dir": str(run_dir)}


def pending(said: Dict) -> str:
    """A pending job's start estimate (squeue's StartTime; LSF's estimate) and why it waits, where it has them."""
    if not said.get("start"):
        return ""
    return f"expected start {said['start']}" + (f" ({said['reason']})" if said.get("reason") else "")


def progress_of(run_dir: Path, manifest: Manifest):
    """The PROGRESS and LAST cells: a task's epochs of its max_epochs; your own code's last metrics.csv row (it has
    no epochs of ours: its command decides how long it trains)."""
    if manifest.is_own_code:
        return metrics.own_progress(run_dir)
    epoch, last = progress(run_dir)
    epochs = manifest.config.get("trainer", {}).get("max_epochs")
    return f"{epoch}/{epochs}" if epochs else str(epoch), last


def progress(run_dir: Path):
    """Epochs finished (results.json's once it is written: a finished run validates its best model once more) and
    the last validation metric, from the run's metrics.csv (Lightning's CSV logger)."""
    path = run_dir / "metrics.csv"
    try:
        rows = list(csv.DictReader(path.open(newline="", errors="replace"))) if path.is_file() else []
    except (OSError, csv.Error):
        rows = []
    done = [r for r in rows if any(k.startswith("val/") and r.get(k) for k in r)]
    if not done:
        return 0, ""
    key = next(k for k in ("val/acc", "val/loss", *done[-1]) if k.startswith("val/") and done[-1].get(k))
    try:
        epochs = json.loads((run_dir / "results.json").read_text())["epochs"]
    except (OSError, ValueError, KeyError):
        epochs = int(float(done[-1].get("epoch") or 0)) + 1
    return epochs, f"{key}={float(done[-1][key]):.4g}"


def age(submitted_at: Optional[str]) -> str:
    if not submitted_at:
        return ""
    seconds = time.time() - time.mktime(time.strptime(submitted_at[:19], "%Y-%m-%dT%H:%M:%S"))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def remote_rows(cluster: Optional[str]) -> List[Dict]:
    """Each cluster your settings reach over SSH, asked at once (one thread each: the time is the slowest one's).
    Asked for every cluster, none may prompt (prompts would interleave); asked for one, it may (a 2FA login)."""
    from cluster_train.host import clusters, settings
    from cluster_train.host.reach import of

    reaches = []
    for file in sorted(project.CLUSTERS.glob("*.yaml")):
        try:
            found = clusters.load(str(file))
        except UserError:
            continue  # a cluster file that does not load: check-cluster says why
        user = settings.load(found.name)  # settings it refuses (a hostile ssh:) are refused here as status refuses them
        if user.get("ssh") and (not cluster or cluster == found.name):
            reaches.append((of(found.name, user), user))
    with ThreadPoolExecutor(max_workers=max(1, len(reaches))) as pool:
        return [row for rows in pool.map(lambda r: ask(*r, batch=not cluster), reaches) for row in rows]


def ask(reach, user: Dict, batch: bool) -> List[Dict]:
    """The cluster's own rows (its `runs --json`), with the settings it needs sent first; or one row saying why not."""
    from cluster_train.host.remote import ssh, sync

    try:
        sync.send_settings(reach, user, batch=batch)
        said = sync.launcher_line(reach, ["runs", "--json", "--here", "--cluster", reach.cluster], batch=batch)
    except UserError as err:  # the cause, without the cluster the row names already or the fix: a row, not a page
        cause = str(err).removeprefix(f"{ssh.where(reach)}: ").split("; ")[0]
        return [{"cluster": reach.cluster, "run": "-", "state": "UNREACHABLE", "segments": "", "progress": "",
                 "gpu-h": "", "last": cause[:CAUSE_WIDTH], "age": ""}]
    return [json.loads(line) for line in said.splitlines() if line.startswith("{")]


def terminal_width() -> Optional[int]:
    """The width the table is cut to, as ls decides it: at a terminal, COLUMNS where set, else the terminal's; None
    where the output is no terminal (a pipe, a file: grep and scripts get whole cells, and --json is there for
    programs), whatever COLUMNS says (shells and test runners export it to every child)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def table(rows: List[Dict], width: Optional[int] = None) -> str:
    """The rows under their columns, each line within `width` (None: no limit) where the key columns leave room: a
    long LAST cell is cut, with an ellipsis. A cluster that did not answer is its name, state and cause, the cause
    right after the state (its run's columns are empty: the line stays within a terminal's width)."""
    answered = [r for r in rows if r["state"] != "UNREACHABLE"]
    cells = [[c.upper() for c in COLUMNS]] + [[str(r.get(c, "")) for c in COLUMNS] for r in answered]
    unreached = [[str(r.get(c, "")) for c in ("cluster", "run", "state", "last")] for r in rows if r not in answered]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    widths[:3] = [max([widths[i], *(len(row[i]) for row in unreached)]) for i in range(3)]
    if width:
        widths[CUT] = min(widths[CUT], max(len("LAST"), width - line_width(widths) + widths[CUT]))
    for row in cells:
        row[CUT] = cut(row[CUT], widths[CUT])
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    room = max(len("LAST"), width - line_width(widths[:3]) - 2) if width else None
    return "\n".join(lines + ["  ".join([*(v.ljust(w) for v, w in zip(row[:3], widths)), cut(row[3], room)])
                              for row in unreached])


def line_width(widths: List[int]) -> int:
    """A line's length with columns this wide, two spaces apart."""
    return sum(widths) + 2 * (len(widths) - 1)


def cut(cell: str, width: Optional[int]) -> str:
    """The cell within `width` characters, its end an ellipsis where it was longer (None: as it is)."""
    if width is None or len(cell) <= width:
        return cell
    return cell[:width - len(ELLIPSIS)] + ELLIPSIS
