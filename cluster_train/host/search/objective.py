"""A trial's objective, read from its run directory as the driver and the reports see it: the value after each
validation (metrics.csv, one row per validation with its epoch) and the final value (results.json's key, else the
last validation's).

What each task logs is named here because the login node must refuse an objective the task never logs before
anything is queued, and must not import the task (torch) to ask it; tests/cluster/test_search.py checks the classify
entry against a real run's files."""
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from cluster_train.host.runs.metrics import read_metrics

LOGGED: Dict[str, Dict[str, Tuple[str, ...]]] = {
    "classify": {"metrics.csv": ("val/acc", "val/loss"),  # after each validation (cluster_train/image/lit.py)
                 "results.json": ("final_val_acc", "final_val_loss", "best_val_loss")},
}


def intermediate(run_dir: Path, metric: str, max_epochs: int, ended: bool = True) -> List[Tuple[int, float]]:
    """(epoch, value) at the end of each epoch so far. An epoch's value is its last validation's: the task's
    validation before training (and a resumed segment's) is logged under the same epoch, before it. A running
    trial's epoch counts once a later epoch has rows (its end-of-epoch row is then written); the validation after
    training (epoch max_epochs) is not an epoch's."""
    by_epoch: Dict[int, float] = {}
    latest = -1
    for row in read_metrics(Path(run_dir) / "metrics.csv"):
        value, epoch = row.get(metric), row.get("epoch")
        if isinstance(epoch, int):
            latest = max(latest, epoch)
            if isinstance(value, (int, float)) and epoch < max_epochs:
                by_epoch[epoch] = float(value)
    return sorted((e, v) for e, v in by_epoch.items() if ended or e < latest)


def final(run_dir: Path, metric: str, max_epochs: int) -> Optional[float]:
    """The objective of a completed run: its results.json value, else its last validation's; None if neither."""
    try:
        results = json.loads((Path(run_dir) / "results.json").read_text())
    except (OSError, ValueError):
        results = {}
    value = results.get(metric) if isinstance(results, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    steps = intermediate(run_dir, metric, max_epochs)
    return steps[-1][1] if steps else None
