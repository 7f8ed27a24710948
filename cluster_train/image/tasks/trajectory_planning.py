"""`task: trajectory_planning`: seed 003's Hydra-MDP planner (model hydra_mdp) on planner_scenes data.

The model is built for the data set's vocabulary and feature widths (meta.json). Writes under output_dir:
checkpoints/<model>/last.ckpt (resume), logs/<model>/metrics.csv, and results.json with the validation loss before
and after, the imitation accuracy (the expert's candidate ranked first) against chance (1 / vocabulary), each metric
head's accuracy, the GPU and the speed facts. Reads no task_params.
"""


from cluster_train.image.lit import Classifier
from cluster_train.shared.models import MODELS
from cluster_train.image.models.trajectory_planner import METRIC_HEADS, planner_loss
from cluster_train.image.tasks.common import fit_validated, seeded_data, write_results

PARAMS = {}  # the task_params keys it reads: none
DATA = "planner_scenes"


class PlannerModule(Classifier):
    """Batches are planner_scenes' dicts; the loss is the model's (imitation CE + one BCE per metric head)."""

    def training_step(self, batch, batch_idx):
        loss = planner_loss(self.model(batch["scene"], batch["ego"]), batch)  # not self(...): see Classifier
        self.log("train/loss", loss, prog_bar=True)  # this rank's, as in Classifier
        return loss

    def validation_step(self, batch, batch_idx):
        scores = self.model(batch["scene"], batch["ego"])
        self.log("val/loss", planner_loss(scores, batch), prog_bar=True, sync_dist=True)
        for name, value in planner_metrics(scores, batch).items():
            self.log(f"val/{name}", value, sync_dist=True)


def planner_metrics(scores: dict, targets: dict) -> dict:
    """imitation_acc: the expert's candidate scores highest; <head>_acc: the head's sigmoid on the right side of 0.5
    for every candidate (progress, a fraction, too)."""
    found = {"imitation_acc": (scores["imitation"].argmax(1) == targets["imitation"]).float().mean()}
    for name in METRIC_HEADS:
        found[f"{name}_acc"] = ((scores[name] > 0) == (targets[name] > 0.5)).float().mean()
    return found


def trajectory_planning(run) -> dict:
    data = seeded_data(run, "trajectory_planning", DATA)
    sizes = {"scene_dim": data.scene_dim, "ego_dim": data.ego_dim}  # data facts, like the vocabulary
    net = MODELS.build(run.model.name, num_classes=data.vocab_size, **{**run.model.params, **sizes})
    module = PlannerModule(net, run.optim)
    fitter, final, facts = fit_validated(run, module, data, run.model.name)
    record = {
        "task": "trajectory_planning", "model": run.model.name,
        "parameters": sum(p.numel() for p in net.parameters()), "vocab_size": data.vocab_size,
        "imitation_acc": final["val/imitation_acc"], "chance_acc": 1.0 / data.vocab_size,
        **{f"{name}_acc": final[f"val/{name}_acc"] for name in METRIC_HEADS},
        **facts,
    }
    return write_results(run.output_dir, record, write=fitter.is_global_zero)
