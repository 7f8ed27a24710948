"""A STUB of api-submit's train/host/api/job.py (theirs is taken at the merge): only what the pipeline API uses, with
the agreed signatures."""
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Union

from train.shared.errors import UserError as ClusterTrainError

Overrides = Union[Mapping[str, Any], Sequence[str]]


@dataclass(frozen=True)
class DryRun:
    """What a submission would queue, with nothing written: the job script, the resolved run config, the summary
    the command line shows and its warnings."""

    script: str
    config: Dict[str, Any]
    summary: str
    warnings: List[str]


def override_lines(overrides: Overrides) -> List[str]:
    """Overrides as --set takes them: "KEY=VALUE" lines as given, a mapping's values as text (JSON where not text,
    which YAML reads back as the same value)."""
    if isinstance(overrides, str):
        raise ClusterTrainError(f"overrides {overrides!r} is one string; give a list of KEY=VALUE strings or a "
                                f"mapping, e.g. overrides={{'trainer.max_epochs': 1}}")
    if isinstance(overrides, Mapping):
        return [f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in overrides.items()]
    return [str(line) for line in overrides]
