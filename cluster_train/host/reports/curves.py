"""Training and validation curves from a run's CSV logs, drawn as PNG bytes with matplotlib (imported only here,
and only when a report is made), or as SVG with the standard library where matplotlib is not installed (svg_curves.py:
the host side runs on login nodes and laptops with only pyyaml and jinja2)."""
import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.reports import svg_curves

# Where tasks write CSV logs: classify's metrics.csv, the multi-model tasks' logs/<model>/metrics.csv, seed 001's
# csv_logs/<arch>_fusions/<arch>_<fusion>_training_log.csv.
CSV_PATTERNS = ("metrics.csv", "logs/*/metrics.csv", "csv_logs/**/*.csv")
X_COLUMNS = ("step", "epoch")  # the x axis, the first one a file has; the rest of its columns are curves
FIGSIZE = (7.5, 3.2)
PANELS = ("loss", "metrics", "learning rate")  # top to bottom
DPI = 100


@dataclass
class Series:
    """One column of one CSV file: the points whose cell is not empty (Lightning leaves the others blank)."""
    source: str  # the CSV's path inside the run directory
    column: str
    x_name: str  # step, epoch, or row (a file with neither)
    x: List[float]
    y: List[float]

    @property
    def points(self) -> int:
        return len(self.y)


def csv_logs(run_dir: Path) -> List[Path]:
    found: List[Path] = []
    for pattern in CSV_PATTERNS:
        found += [p for p in sorted(run_dir.glob(pattern)) if p.is_file() and p not in found]
    return found


def read_series(run_dir: Path, path: Path) -> List[Series]:
    """Every numeric column of one CSV log (appended across segments: one header, rows in order)."""
    try:
        with path.open(newline="", errors="replace") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error):  # unreadable, or torn by a job killed mid-write: the rest of the report still helps
        return []
    if not rows:
        return []
    x_name = next((c for c in X_COLUMNS if c in rows[0]), None)
    source = str(path.relative_to(run_dir))
    series = []
    for column in rows[0]:
        if column in X_COLUMNS or column is None:
            continue
        x, y = [], []
        for index, row in enumerate(rows):
            value = number(row.get(column))
            if value is not None:
                at = number(row.get(x_name)) if x_name else None
                x.append(float(index) if at is None else at)
                y.append(value)
        if y:
            series.append(Series(source, column, x_name or "row", x, y))
    return series


def number(cell):
    try:
        return float(cell) if cell not in (None, "") else None
    except ValueError:
        return None


def run_series(run_dir: Path) -> List[Series]:
    return [s for path in csv_logs(run_dir) for s in read_series(run_dir, path)]


def panel(column: str) -> str:
    """Which plot a column goes on: losses together, learning rates together, the rest (accuracies) together."""
    name = column.lower()
    if "loss" in name:
        return "loss"
    if "lr" in re.split(r"[/_\-]", name):
        return "learning rate"
    return "metrics"


def matplotlib_figure():
    """matplotlib's Figure class, or None where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a login node
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def pyplot_figure():
    """matplotlib's Figure class, for a figure only matplotlib draws (scaling.py)."""
    figure = matplotlib_figure()
    if figure is None:
        raise UserError("matplotlib is not installed; scaling figures need it: python3 -m pip install --user "
                        "matplotlib")
    return figure


def png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def run_figure(series: Sequence[Series], title: str) -> bytes:
    """One CSV's curves: one panel per kind (loss, metrics, learning rate), x = step (or epoch)."""
    panels = {name: [s for s in series if panel(s.column) == name] for name in PANELS}
    panels = {name: members for name, members in panels.items() if members}
    figure = matplotlib_figure()
    if figure is None:
        return svg_curves.figure([(name, [(s.column, s.x, s.y) for s in members]) for name, members in panels.items()],
                                 title, series[0].x_name)
    height = FIGSIZE[1] if len(panels) == 1 else FIGSIZE[1] * 0.75 * len(panels)
    fig = figure(figsize=(FIGSIZE[0], height), layout="constrained")  # labels never overlap a panel
    for i, (name, members) in enumerate(panels.items()):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        for s in members:
            draw(ax, s, s.column)
        last = i == len(panels) - 1
        style(ax, name, title if i == 0 else None, members[0].x_name if last else "")
    return png(fig)


def overlay_figure(lines: Sequence[Tuple[str, Series]], title: str) -> bytes:
    """One column of one CSV across several runs: one line per run."""
    figure = matplotlib_figure()
    if figure is None:
        return svg_curves.figure([(lines[0][1].column, [(label, s.x, s.y) for label, s in lines])], title,
                                 lines[0][1].x_name)
    fig = figure(figsize=FIGSIZE, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for label, s in lines:
        draw(ax, s, label)
    style(ax, lines[0][1].column, title, lines[0][1].x_name)
    return png(fig)


def draw(ax, s: Series, label: str) -> None:
    # markers where a curve has few points (per-epoch validation), so a 2-epoch run still shows its points
    ax.plot(s.x, s.y, label=label, marker="o" if s.points <= 30 else None, markersize=3, linewidth=1.2)


def style(ax, y_label: str, title, x: str) -> None:
    ax.set_ylabel(y_label)
    ax.set_xlabel(x)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    if title:
        ax.set_title(title, fontsize=9)
