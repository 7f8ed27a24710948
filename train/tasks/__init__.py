"""Task registry: what `python -m train fit` runs for a config's `task` (one name, one function(run) -> dict)."""
from train.registry import Registry

TASKS = Registry("task")

from train.tasks import cifar_experts, cifar_fusion, classify, video_suite  # noqa: E402,F401  (register their tasks)
