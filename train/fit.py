"""`python -m train fit`: look the config's task up (train/tasks) and run it (the Trainer factory: train/trainer.py)."""
from train import config as cfg
from train.tasks import TASKS


def fit(run: cfg.RunConfig) -> dict:
    """Run the config's task: classify (one model, the default), video_suite, cifar_experts, cifar_fusion, ..."""
    return TASKS.get(run.task)(run)
