"""The overrides the API takes: a mapping of dotted keys to Python values ({"trainer.max_epochs": 1}) or KEY=VALUE
strings as --set takes them. They are kept as given, never rendered to text: the job builder types them once
(cluster_train/host/jobs/build.py typed_overrides), so "007" reaches config.yaml as "007"."""
from typing import Any, Mapping, Sequence, Union

from cluster_train.host.api.errors import ClusterTrainError

Overrides = Union[Mapping[str, Any], Sequence[str]]  # {"trainer.max_epochs": 1} or ["trainer.max_epochs=1"]


def given_overrides(overrides: Overrides) -> Overrides:
    """A mapping's copy, or the list of lines; one string refused (it would be read as one-character lines)."""
    if isinstance(overrides, str):
        raise ClusterTrainError(f"overrides {overrides!r} is one string; give a list of KEY=VALUE strings or a "
                                f"mapping, e.g. overrides={{'trainer.max_epochs': 1}}")
    return dict(overrides) if isinstance(overrides, Mapping) else [str(line) for line in overrides]
