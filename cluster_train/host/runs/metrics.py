"""A run's CSV logs (Lightning's CSV logger writes metrics.csv: one row per logged step or validation, blank cells
elsewhere) read as rows of numbers, for `Run.metrics()`."""
import csv
from pathlib import Path
from typing import Dict, List, Union

Cell = Union[int, float, str]


def read_metrics(path: Path) -> List[Dict[str, Cell]]:
    """A CSV log's rows, each cell a number where it reads as one; empty cells left out."""
    if not path.is_file():
        return []
    with path.open(newline="", errors="replace") as f:
        return [{key: number(value) for key, value in row.items() if key and value not in (None, "")}
                for row in csv.DictReader(f)]


def number(cell: str) -> Cell:
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            continue
    return cell
