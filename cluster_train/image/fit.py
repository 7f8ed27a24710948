"""`python -m train fit`: look the config's task up (cluster_train/image/tasks) and run it (the Trainer factory:
cluster_train/image/trainer.py)."""
from cluster_train.shared import config as cfg
from cluster_train.image import trackers
from cluster_train.shared.tasks import TASKS


def fit(run: cfg.RunConfig) -> dict:
    """Run the config's task: classify (one model, the default), video_suite, cifar_experts, cifar_fusion, ...
    However the segment ends (done, saved for a requeue, failed), its tracked runs are closed."""
    exit_code = 1
    try:
        results = TASKS.get(run.task)(run)
        exit_code = 0
        return results
    except SystemExit as stop:
        exit_code = stop.code if isinstance(stop.code, int) else 1
        raise
    finally:
        trackers.finish(run, exit_code)
