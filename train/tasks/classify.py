"""`task: classify` (the default): one registered model trained on one data set (train.fit.classify)."""
from train.tasks import TASKS


@TASKS.register("classify")
def classify(run):
    from train.fit import classify as run_classify

    return run_classify(run)
