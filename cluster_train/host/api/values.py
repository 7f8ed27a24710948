"""The API's plain values and the types of its arguments, apart from the modules that make them (job.py,
over_ssh.py), which both use them."""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Union

from cluster_train.host.api.run import Run

Overrides = Union[Mapping[str, Any], Sequence[str]]  # {"trainer.max_epochs": 1} or ["trainer.max_epochs=1"]
After = Sequence[Union[Run, str, Path]]  # runs, by Run, run id or run directory


@dataclass(frozen=True)
class DryRun:
    """What a submission would queue, with nothing written: the job script, the resolved run config, the summary
    the command line shows and its warnings."""

    script: str
    config: Dict[str, Any]
    summary: str
    warnings: List[str]
