"""Task registry: what `python -m train fit` runs for a config's `task` (one name, one function(run) -> dict).

One task per module. Each module declares, as module-level literals read without importing it
(cluster_train/shared/registry.py), the `task_params` keys it reads with their defaults (PARAMS) and which of them hold
names of another registry (PARAM_NAMES), so the login node can check a run's task_params before queueing it.
"""
from cluster_train.shared.registry import TaskRegistry

TASKS = TaskRegistry("task", {
    name: f"cluster_train.image.tasks.{name}:{name}" for name in (
        "classify", "cifar_experts", "cifar_fusion", "video_suite",
        "trajectory_planning", "motion_tokens",  # seeds 003 and 004
    )
}, fixed=("run",))
