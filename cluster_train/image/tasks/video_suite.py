"""`task: video_suite`: seed 000's experiment, its six video models trained in sequence on one data set.

Writes what the seed's users read, under output_dir:
  models/<Model>_best_weights.pth       state_dict at the best validation accuracy
  models/<Model>_final_weights.pth      state_dict after the last epoch
  checkpoints/<Model>_epoch_<k>.pth     per epoch: epoch, model and optimizer state, that epoch's metrics
  checkpoints/<Model>_training_history.json   per-epoch train_loss, val_loss, val_acc (+ test_acc at the end)
  results.json and, in the log, the FINAL RESULTS SUMMARY table with the best model (test accuracy of the
  best weights).
  checkpoints/<Model>/last.ckpt and checkpoints/done/<Model>.json   resume: a requeued run skips the models it
  finished (their test accuracy is read back from their training history) and resumes the one in progress.
task_params: models (default: the six, in the seed's order), model_params (keyword arguments for every model).
"""
import json
from pathlib import Path

import pytorch_lightning as pl
import torch

from cluster_train.shared.data import build as build_data
from cluster_train.shared.errors import UserError
from cluster_train.image.lit import Classifier
from cluster_train.shared.models import MODELS
from cluster_train.image.speed import speed_facts
from cluster_train.image.tasks.common import EpochHistory, finished, fit_resuming, mark_done, trainer, write_results

# The task_params it reads, with their defaults: `models` defaults to the seed's six, in its order.
PARAMS = {"models": ["PerFrameAggregation2D", "LateFusion2D", "EarlyFusion2D", "PerFrameAggregation3D", "LateFusion3D",
                     "EarlyFusion3D"], "model_params": {}}
PARAM_NAMES = {"models": "models"}  # a list of model names
SIX_MODELS = tuple(PARAMS["models"])


class SeedFiles(EpochHistory):
    def __init__(self, out: Path, name: str):
        super().__init__()
        self.out, self.name, self.best = out, name, -1.0

    def on_epoch_recorded(self, trainer, module):
        if not trainer.is_global_zero:
            return
        epoch, acc = self.history["epoch"][-1], self.history["val_acc"][-1]
        state = {k: v.detach().cpu() for k, v in module.model.state_dict().items()}
        torch.save(
            {"epoch": epoch, "model_state_dict": state,
             "optimizer_state_dict": trainer.optimizers[0].state_dict(),
             "metrics": {k: v[-1] for k, v in self.history.items()}},
            self.out / "checkpoints" / f"{self.name}_epoch_{epoch + 1}.pth",
        )
        if acc > self.best:
            self.best = acc
            torch.save(state, self.out / "models" / f"{self.name}_best_weights.pth")


def video_suite(run) -> dict:
    out = Path(run.output_dir)
    names = list(run.task_params.get("models", SIX_MODELS))
    for name in names:
        MODELS.get(name)  # an unknown name fails now, not after hours of training the ones before it
    params = dict(run.task_params.get("model_params", {}))
    (out / "models").mkdir(parents=True, exist_ok=True)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    data = build_data(run.data)
    results, speed = {}, {}
    for name in names:
        history_file = out / "checkpoints" / f"{name}_training_history.json"
        seed_files = [out / "models" / f"{name}_{kind}_weights.pth" for kind in ("best", "final")] + [history_file]
        if finished(out, name, seed_files):
            results[name] = json.loads(history_file.read_text())["test_acc"]
            continue
        print(f"[cluster-train] video_suite: training {name}", flush=True)
        pl.seed_everything(run.seed, workers=True)
        net = MODELS.build(name, num_classes=data.num_classes, **params)
        module = Classifier(net, run.optim)
        files = SeedFiles(out, name)
        fitter = trainer(run, out, name, callbacks=[files])
        fit_resuming(fitter, module, data, out, name)
        torch.save(net.state_dict(), out / "models" / f"{name}_final_weights.pth")
        net.load_state_dict(torch.load(out / "models" / f"{name}_best_weights.pth"))
        test_acc = _accuracy(net, data.test_dataloader(), module.device)
        history = dict(files.history, best_val_acc=files.best, test_acc=test_acc)
        history_file.write_text(json.dumps(history, indent=2) + "\n")
        mark_done(out, name, {"test_acc": test_acc}, write=fitter.is_global_zero)
        results[name] = test_acc
        speed[name] = speed_facts(fitter, run.data.num_workers)
    print(summary(results), flush=True)
    best = max(results, key=results.get)
    record = {"task": "video_suite", "test_acc": results, "best_model": best, "speed": speed}
    return write_results(out, record)


def summary(results: dict) -> str:
    best = max(results, key=results.get)
    lines = ["", "=" * 60, "FINAL RESULTS SUMMARY", "=" * 60]
    lines += [f"{name:22s}: {100 * acc:7.2f}%" for name, acc in results.items()]
    lines += ["", f"Best performing model: {best} ({100 * results[best]:.2f}%)"]
    return "\n".join(lines)


@torch.no_grad()
def _accuracy(net, loader, device) -> float:
    net.eval()
    correct = total = 0
    for x, y in loader:
        correct += (net(x.to(device)).argmax(1).cpu() == y).sum().item()
        total += len(y)
    if total == 0:
        raise UserError("the test split is empty; add videos to metadata/test.csv")
    return correct / total
