"""`task: motion_tokens`: seed 004's SMART-style motion model (model smart) on motion_tokens data, trained by
next-token prediction over every agent's motion tokens.

The model is built for the data set's token vocabulary (meta.json). Writes under output_dir:
checkpoints/<model>/last.ckpt (resume), logs/<model>/metrics.csv, and results.json with the validation loss before
and after, the next-token accuracy against chance (1 / vocabulary) and against repeating the agent's last token (a
constant-velocity guess), the GPU and the speed facts. Reads no task_params.
"""

import torch

from cluster_train.image.lit import Classifier
from cluster_train.shared.models import MODELS
from cluster_train.image.models.motion_tokens import next_token_loss
from cluster_train.image.tasks.common import fit_validated, seeded_data, write_results

PARAMS = {}  # the task_params keys it reads: none
DATA = "motion_tokens"


class MotionTokenModule(Classifier):
    """Batches are token tensors (B, agents, steps): each is both the input and, one step later, the target."""

    def training_step(self, tokens, batch_idx):
        loss = next_token_loss(self.model(tokens), tokens)  # not self(...): see Classifier
        self.log("train/loss", loss, prog_bar=True)  # this rank's, as in Classifier
        return loss

    def validation_step(self, tokens, batch_idx):
        logits = self.model(tokens)
        self.log("val/loss", next_token_loss(logits, tokens), prog_bar=True, sync_dist=True)
        self.log("val/next_token_acc", next_token_accuracy(logits, tokens), sync_dist=True)
        self.log("val/repeat_last_acc", (tokens[:, :, :-1] == tokens[:, :, 1:]).float().mean(), sync_dist=True)


def next_token_accuracy(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return (logits[:, :, :-1].argmax(-1) == tokens[:, :, 1:]).float().mean()


def motion_tokens(run) -> dict:
    data = seeded_data(run, "motion_tokens", DATA)
    net = MODELS.build(run.model.name, num_classes=data.vocab_size, **run.model.params)
    module = MotionTokenModule(net, run.optim)
    fitter, final, facts = fit_validated(run, module, data, run.model.name)
    record = {
        "task": "motion_tokens", "model": run.model.name,
        "parameters": sum(p.numel() for p in net.parameters()), "vocab_size": data.vocab_size,
        "next_token_acc": final["val/next_token_acc"], "chance_acc": 1.0 / data.vocab_size,
        "repeat_last_acc": final["val/repeat_last_acc"],
        **facts,
    }
    return write_results(run.output_dir, record, write=fitter.is_global_zero)
