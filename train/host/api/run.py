"""A run of cluster-train: its run directory. A stub of api-run's Run (train/host/api/run.py is theirs): the
signature the agreed API shape gives, enough for Job.submit to return one."""
from pathlib import Path
from typing import Union


class Run:
    """A run, by its run directory."""

    def __init__(self, path_or_id: Union[str, Path]) -> None:
        self.path = Path(path_or_id)
