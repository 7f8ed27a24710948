"""`run-cluster compare runs/a runs/b ...`: what differs between runs (config keys, image, code) and their metrics,
as one terminal table. The run facts it reads (`Run`, `flat`, `differing`) are the report's too (run_facts.py)."""
import math
from pathlib import Path
from typing import List, Optional, Sequence

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.reports.run_facts import (
    Run, code_version, differing, flat, load_run, lower_is_better, short_digest, show)
from cluster_train.host.usage import Parser

CELL_WIDTH = 40  # a terminal table with long paths in it is unreadable; the report shows them whole


def clip(text: str, width: int = CELL_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def comparison_rows(all_runs: Sequence[Run]) -> List[List[str]]:
    """One row per fact: run id, image, data, code, each differing config key, each metric (best value marked *)."""
    rows = [["run"] + [r.run_id for r in all_runs],
            ["image"] + [short_digest(r.manifest) for r in all_runs],
            ["data"] + [r.manifest.data_version() for r in all_runs],
            ["code"] + [code_version(r.manifest) for r in all_runs]]
    for key in differing([r.config for r in all_runs]):
        rows.append([key] + [show(flat(r.config).get(key)) for r in all_runs])
    metrics = [r.metrics() for r in all_runs]
    for name in dict.fromkeys(k for m in metrics for k in m):  # results.json's order: initial, final, best, ...
        rows.append([name] + mark_best(name, [m.get(name) for m in metrics]))
    return rows


def mark_best(name: str, values: List[Optional[float]]) -> List[str]:
    known = [v for v in values if v is not None and not math.isnan(v)]
    if len(set(known)) < 2 or name == "epochs":  # nothing to choose between
        return [show(v) for v in values]
    best = min(known) if lower_is_better(name) else max(known)
    return [show(v) + (" *" if v == best else "") for v in values]


def table(rows: List[List[str]]) -> str:
    cells = [[clip(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def compare(paths: Sequence[Path]) -> str:
    if len(paths) < 2:
        raise UserError("compare needs two run directories or more: run-cluster compare runs/<a> runs/<b> ...")
    all_runs = [load_run(Path(p)) for p in paths]
    return (table(comparison_rows(all_runs))
            + "\n(* the best value of a metric; config keys shown are those that differ)")


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster compare", description="what differs between runs (config keys, image, code) and "
                                                        "their metrics, as one table")
    p.add_argument("run_dirs", nargs="+", type=runs.find, metavar="RUN_DIR", help="run directories or ids")
    print(compare(p.parse_args(argv).run_dirs))
    return 0
