"""`python -m train fit`: look the config's task up (train/tasks) and run it.

The Trainer factory lives in train/trainer.py; its names are re-exported here for callers of the older layout.
"""
from train import config as cfg
from train.tasks import TASKS
from train.trainer import AnnounceRanks, accelerator_for, build_trainer, cluster_plugins, trainer_options  # noqa: F401


def fit(run: cfg.RunConfig) -> dict:
    """Run the config's task: classify (one model, the default), video_suite, cifar_experts, cifar_fusion, ..."""
    return TASKS.get(run.task)(run)
