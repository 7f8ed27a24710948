"""The files each data set reads under data.root, checked before a job is queued: an empty or wrong folder would
otherwise fail only in the job, after its wait in the queue. Paths relative to data.root, as each data set's format
module lays them out (cluster_train/image/data/*_format.py; tests/host/test_data_files.py holds this table to their
generators); the loader still reads and checks what is inside them."""
from pathlib import Path
from typing import Dict, List, Tuple

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError

NEEDS: Dict[str, Tuple[str, ...]] = {
    "cifar100": ("cifar-100-python/train", "cifar-100-python/test", "cifar-100-python/meta"),
    "ufc10": ("metadata/train.csv", "metadata/val.csv", "metadata/test.csv"),
    "planner_scenes": ("meta.json", "vocabulary.npy"),
    "motion_tokens": ("meta.json",),
}


def problems(runs: List[cfg.RunConfig]) -> List[UserError]:
    """Each run's data.root holds what its data set reads (a command's, where it names one: something at all)."""
    found = {}
    for run in runs:
        root = Path(run.data.root) if run.data.root and not run.data.image else None
        if root is None or not _is_dir(root):  # none bound, a data image, or refused as missing already
            continue
        if run.command:
            absent = [] if any(root.iterdir()) else ["any file"]
        else:
            absent = [name for name in NEEDS.get(run.data.name, ()) if not (root / name).is_file()]
        if absent:
            what = "your command" if run.command else f"data set {run.data.name!r}"
            found[str(root)] = UserError(f"data.root: {root} lacks {', '.join(absent)}, which {what} reads; put the "
                                         f"data there (the generated data sets: make data) or fix data.root")
    return list(found.values())


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long for the file system: refused as missing already
        return False
