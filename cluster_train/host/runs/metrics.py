"""A run's CSV logs (Lightning's CSV logger writes metrics.csv: one row per logged step or validation, blank cells
elsewhere) read as rows of numbers, for `Run.metrics()`; and your own code's results and progress, from the same two
files the tasks write (the results contract, docs/how-to/own-code.md#results-and-curves): `$CT_RUN_DIR/metrics.csv`
(a `step` and optional `epoch` column, one column per metric, rows appended) and `$CT_RUN_DIR/results.json` (a flat
object of final numbers)."""
import csv
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple, Union

Cell = Union[int, float, str]
METRICS, RESULTS = "metrics.csv", "results.json"
X_COLUMNS = ("step", "epoch")  # where a row is; the other columns are metrics


def read_metrics(path: Path) -> List[Dict[str, Cell]]:
    """A CSV log's rows, each cell a number where it reads as one; empty cells left out; [] for none, or for a file
    torn by a job killed mid-write."""
    if not path.is_file():
        return []
    try:
        with path.open(newline="", errors="replace") as f:
            return [{key: number(value) for key, value in row.items() if key and value not in (None, "")}
                    for row in csv.DictReader(f)]
    except (OSError, csv.Error):
        return []


def number(cell: str) -> Cell:
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            continue
    return cell


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def own_results(results: Dict[str, Any]) -> Dict[str, float]:
    """Your own code's results: every number of results.json's (flat) object; nothing is a fact the tasks add."""
    return {str(k): float(v) for k, v in results.items() if is_number(v)}


def own_progress(run_dir: Path) -> Tuple[str, str]:
    """Your own code's progress and last value: its metrics.csv's last row (`step 300`, `loss=0.0123`), else its
    results.json's first number; ("", "") before either is written."""
    rows = read_metrics(Path(run_dir) / METRICS)
    if rows:
        last = rows[-1]
        where = " ".join(f"{x} {last[x]}" for x in reversed(X_COLUMNS) if x in last) or f"row {len(rows)}"
        value = next(((k, v) for k, v in last.items() if k not in X_COLUMNS and is_number(v)), None)
        return where, f"{value[0]}={value[1]:.4g}" if value else ""
    try:
        results = own_results(json.loads((Path(run_dir) / RESULTS).read_text()))
    except (OSError, ValueError, AttributeError):
        return "", ""
    first = next(iter(results.items()), None)
    return "done" if results else "", f"{first[0]}={first[1]:.4g}" if first else ""
