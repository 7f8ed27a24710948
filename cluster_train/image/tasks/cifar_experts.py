"""`task: cifar_experts`: seed 001's first stage, several experts of one CIFAR architecture.

A fraction of the training set is held out for the fusion stage; its indices are saved first, so the fusion
stage trains only on images no expert saw. Every expert trains on the rest with its own seed.
Writes under output_dir:
  splits/fusion_holdout_indices.npy
  checkpoints/<model.name>/fusion_holdout_indices.npy  the same split, so the experts folder alone is enough to fuse
  checkpoints/<model.name>/expert_<i>_best.pth   {model_name, model_params, num_classes, state_dict, val_acc, epoch}
  checkpoints/<model.name>/expert_<i>_history.json
  checkpoints/<model.name>_expert_<i>/last.ckpt, checkpoints/done/<model.name>_expert_<i>.json   resume: a requeued
                                                  run skips the experts it finished and resumes the one in progress
task_params: num_experts (4), fusion_holdout (fraction of the training set, 0.2), model_sizes ({model name: params}:
the size each architecture trains at when chosen by model.name; model.params overrides its row key by key).
"""
import json
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

from cluster_train.shared.data import build as build_data
from cluster_train.shared.errors import UserError
from cluster_train.image.lit import Classifier
from cluster_train.shared.models import MODELS
from cluster_train.image.speed import speed_facts
from cluster_train.image.tasks.common import EpochHistory, finished, fit_resuming, mark_done, trainer, write_results
from cluster_train.image.tasks.subset_data import TrainSubset, train_size

PARAMS = {"num_experts": 4, "fusion_holdout": 0.2, "model_sizes": {}}  # the task_params it reads, with their defaults
PARAM_NAMES = {"model_sizes": "models"}  # its keys are model names

HOLDOUT_FILE = Path("splits") / "fusion_holdout_indices.npy"
HOLDOUT_BESIDE_EXPERTS = HOLDOUT_FILE.name  # in checkpoints/<model.name>/, next to the experts


class SaveBestExpert(EpochHistory):
    def __init__(self, path: Path, meta: dict):
        super().__init__()
        self.path, self.meta, self.best = path, meta, -1.0

    def on_epoch_recorded(self, trainer, module):
        acc = self.history["val_acc"][-1]
        if trainer.is_global_zero and acc > self.best:
            self.best = acc
            state = {k: v.detach().cpu() for k, v in module.model.state_dict().items()}
            torch.save(dict(self.meta, state_dict=state, val_acc=acc, epoch=self.history["epoch"][-1]), self.path)


def model_params(run) -> dict:
    """The experts' constructor arguments: model.params over the chosen architecture's row of model_sizes."""
    sizes = run.task_params.get("model_sizes") or {}
    return {**(sizes.get(run.model.name) or {}), **run.model.params}


def cifar_experts(run) -> dict:
    out = Path(run.output_dir)
    experts = int(run.task_params.get("num_experts", 4))
    holdout = float(run.task_params.get("fusion_holdout", 0.2))
    if not 0 < holdout < 1:
        raise UserError(f"task_params.fusion_holdout = {holdout} must be a fraction between 0 and 1, e.g. 0.2")
    MODELS.get(run.model.name)
    n = train_size(build_data(run.data))
    order = np.random.default_rng(run.seed).permutation(n)
    held, kept = np.sort(order[: int(round(holdout * n))]), np.sort(order[int(round(holdout * n)) :])
    (out / HOLDOUT_FILE).parent.mkdir(parents=True, exist_ok=True)
    np.save(out / HOLDOUT_FILE, held)
    folder = out / "checkpoints" / run.model.name
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / HOLDOUT_BESIDE_EXPERTS, held)
    params = model_params(run)
    results, speed = {}, {}
    for i in range(experts):
        log_name, history_file = f"{run.model.name}_expert_{i}", folder / f"expert_{i}_history.json"
        if finished(out, log_name, [folder / f"expert_{i}_best.pth", history_file]):
            results[f"expert_{i}"] = json.loads(history_file.read_text())["best_val_acc"]
            continue
        print(f"[cluster-train] cifar_experts: {run.model.name} {params} expert {i}", flush=True)
        pl.seed_everything(run.seed + i, workers=True)  # a different start and batch order per expert
        data = TrainSubset(build_data(run.data), kept)
        net = MODELS.build(run.model.name, num_classes=data.num_classes, **params)
        meta = {"model_name": run.model.name, "model_params": dict(params), "num_classes": data.num_classes}
        saver = SaveBestExpert(folder / f"expert_{i}_best.pth", meta)
        fitter = trainer(run, out, log_name, callbacks=[saver])
        fit_resuming(fitter, Classifier(net, run.optim), data, out, log_name)
        history_file.write_text(json.dumps(dict(saver.history, best_val_acc=saver.best), indent=2) + "\n")
        mark_done(out, log_name, {"best_val_acc": saver.best}, write=fitter.is_global_zero)
        results[f"expert_{i}"] = saver.best
        speed[f"expert_{i}"] = speed_facts(fitter, run.data.num_workers)
    record = {"task": "cifar_experts", "model": run.model.name, "model_params": params, "best_val_acc": results,
              "holdout_size": int(len(held)), "expert_train_size": int(len(kept)), "speed": speed}
    return write_results(out, record)


def load_expert(path: Path) -> torch.nn.Module:
    if not Path(path).is_file():
        raise UserError(f"expert checkpoint {path} is missing; train the experts first (task: cifar_experts)")
    saved = torch.load(path, map_location="cpu")
    net = MODELS.build(saved["model_name"], num_classes=saved["num_classes"], **saved["model_params"])
    net.load_state_dict(saved["state_dict"])
    return net
