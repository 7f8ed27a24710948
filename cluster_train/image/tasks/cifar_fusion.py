"""`task: cifar_fusion`: seed 001's second stage, one fusion head over the experts of one architecture.

Loads task_params.experts_dir/expert_<i>_best.pth (from task: cifar_experts) and trains on the held-out fusion
split only. The experts keep training (not frozen) at experts_lr; the fusion head trains at fusion_lr scaled by
sqrt(256 / its input size), so a head reading four wide experts takes smaller steps than one reading narrow ones.
The loss is dual-path: the fused head's cross-entropy plus expert_loss_weight times the mean of each expert's own
head's cross-entropy, so experts stay good classifiers on their own. Gradients are clipped (trainer.gradient_clip_val,
1.0 when unset).
Writes under output_dir (at the best validation accuracy):
  <arch>_fusions/<fusion>/experts/expert_<i>.pth    each loadable alone by cifar_experts.load_expert
  <arch>_fusions/<fusion>/fusion/fusion_head.pth    the head and what rebuilds it
  <arch>_fusions/<fusion>/global/fusion_model.pth   the whole model's state_dict, and global/config.json
  csv_logs/<arch>_fusions/<arch>_<fusion>_training_log.csv   per epoch: loss, accuracy, val_loss, val_accuracy,
                                                             expert_accuracy, experts_lr, fusion_lr
  checkpoints/<arch>_<fusion>/last.ckpt   a requeued run resumes from it (the CSV keeps the epochs before it)
The trackers `tracker:` names (W&B, MLflow) log it as a run in the project wandb_project (unless tracker.experiment
names one), as seed 001 named one per architecture.
task_params: experts_dir (required), holdout_path (default: fusion_holdout_indices.npy in experts_dir, else
<experts run>/splits/fusion_holdout_indices.npy),
fusion (multiplicative), num_experts (4), experts_lr (optim.lr / 10), fusion_lr (optim.lr), fusion_dim (64),
expert_loss_weight (0.5), wandb_project (MCN_<arch>_Fusion).
"""
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback

from cluster_train.shared.data import build as build_data
from cluster_train.shared.errors import UserError
from cluster_train.shared.models import FUSION_HEADS
from cluster_train.image.models.fusion import FusionNet
from cluster_train.shared.registry import NOT_LITERAL, REQUIRED
from cluster_train.image.tasks.cifar_experts import HOLDOUT_BESIDE_EXPERTS, HOLDOUT_FILE, load_expert
from cluster_train.image.speed import speed_facts
from cluster_train.image.tasks.common import fit_resuming, trainer, write_results
from cluster_train.image.tasks.subset_data import TrainSubset

# The task_params it reads, with their defaults (NOT_LITERAL: computed from the run, see the docstring).
PARAMS = {"experts_dir": REQUIRED, "holdout_path": NOT_LITERAL, "fusion": "multiplicative", "num_experts": 4,
          "experts_lr": NOT_LITERAL, "fusion_lr": NOT_LITERAL, "fusion_dim": 64, "expert_loss_weight": 0.5,
          "wandb_project": NOT_LITERAL}
PARAM_NAMES = {"fusion": "fusion heads"}

REFERENCE_DIM = 256  # the fusion input size at which fusion_lr is used unscaled
CSV_COLUMNS = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy", "expert_accuracy", "experts_lr", "fusion_lr")


class FusionModule(pl.LightningModule):
    def __init__(self, net: FusionNet, experts_lr: float, fusion_lr: float, expert_loss_weight: float,
                 weight_decay: float):
        super().__init__()
        self.net = net
        self.experts_lr, self.fusion_lr = experts_lr, fusion_lr
        self.expert_loss_weight, self.weight_decay = expert_loss_weight, weight_decay

    def forward(self, x):
        return self.net(x)[0]

    def _losses(self, batch):
        x, y = batch
        fused, own = self.net(x)
        fused_loss = F.cross_entropy(fused, y)
        expert_loss = torch.stack([F.cross_entropy(o, y) for o in own]).mean()
        expert_acc = torch.stack([(o.argmax(1) == y).float().mean() for o in own]).mean()
        return fused_loss + self.expert_loss_weight * expert_loss, (fused.argmax(1) == y).float().mean(), expert_acc

    def training_step(self, batch, batch_idx):
        loss, acc, expert_acc = self._losses(batch)
        self.log_dict({"train/loss": loss, "train/acc": acc}, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, acc, expert_acc = self._losses(batch)
        self.log_dict({"val/loss": loss, "val/acc": acc, "val/expert_acc": expert_acc}, prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        groups = [
            {"params": self.net.experts.parameters(), "lr": self.experts_lr, "name": "experts"},
            {"params": self.net.fusion.parameters(), "lr": self.fusion_lr, "name": "fusion"},
        ]
        opt = torch.optim.AdamW(groups, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.trainer.max_epochs))
        return {"optimizer": opt, "lr_scheduler": sched}


class CsvAndComponents(Callback):
    """Per-epoch CSV row; components saved whenever validation accuracy improves."""

    def __init__(self, csv_path: Path, components: Path, meta: dict):
        self.csv_path, self.components, self.meta, self.best = csv_path, components, meta, -1.0

    def on_train_start(self, trainer, module):
        """A fresh CSV; on a resume, the rows of the epochs before the checkpoint (later ones are trained again)."""
        if not trainer.is_global_zero:
            return
        kept = []
        if trainer.ckpt_path is not None and self.csv_path.is_file():
            with self.csv_path.open(newline="") as f:
                kept = [row for row in list(csv.reader(f))[1:] if row and int(row[0]) < trainer.current_epoch]
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        with self.csv_path.open("w", newline="") as f:
            csv.writer(f).writerows([CSV_COLUMNS, *kept])

    def state_dict(self):
        return {"best": self.best}

    def load_state_dict(self, state_dict):
        self.best = state_dict["best"]

    def on_train_epoch_end(self, trainer, module):
        # Lightning 2 runs this after the epoch's validation, once the epoch-mean train metrics are in.
        m = trainer.callback_metrics
        if "val/acc" not in m or not trainer.is_global_zero:
            return
        lrs = {g["name"]: g["lr"] for g in trainer.optimizers[0].param_groups}
        row = (trainer.current_epoch, float(m["train/loss"]), float(m["train/acc"]), float(m["val/loss"]),
               float(m["val/acc"]), float(m["val/expert_acc"]), lrs["experts"], lrs["fusion"])
        with self.csv_path.open("a", newline="") as f:
            csv.writer(f).writerow(row)
        if row[4] > self.best:
            self.best = row[4]
            save_components(module.net, self.components, self.meta, dict(zip(CSV_COLUMNS, row)))


def save_components(net: FusionNet, folder: Path, meta: dict, metrics: dict) -> None:
    for sub in ("experts", "fusion", "global"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for i, expert in enumerate(net.experts):
        torch.save(dict(meta["experts"][i], state_dict=_cpu(expert.state_dict())),
                   folder / "experts" / f"expert_{i}.pth")
    torch.save({"fusion": meta["fusion"], "feature_dims": net.feature_dims, "num_classes": meta["num_classes"],
                "head_params": meta["head_params"], "state_dict": _cpu(net.fusion.state_dict())},
               folder / "fusion" / "fusion_head.pth")
    torch.save(_cpu(net.state_dict()), folder / "global" / "fusion_model.pth")
    (folder / "global" / "config.json").write_text(json.dumps(dict(metrics, fusion=meta["fusion"],
                                                                  num_experts=len(net.experts)), indent=2) + "\n")


def load_fusion_model(folder) -> FusionNet:
    """Rebuild a FusionNet from a components folder (<arch>_fusions/<fusion>/): experts/ and fusion/."""
    folder = Path(folder)
    head = folder / "fusion" / "fusion_head.pth"
    if not head.is_file():
        raise UserError(f"fusion head {head} is missing; is {folder} a cifar_fusion components folder?")
    saved = torch.load(head, map_location="cpu")
    experts = [load_expert(p) for p in sorted((folder / "experts").glob("expert_*.pth"))]
    net = FusionNet(experts, saved["fusion"], saved["num_classes"], **saved["head_params"])
    net.fusion.load_state_dict(saved["state_dict"])
    return net


def _cpu(state):
    return {k: v.detach().cpu() for k, v in state.items()}


def _default_holdout(experts_dir: Path) -> Path:
    beside = experts_dir / HOLDOUT_BESIDE_EXPERTS
    return beside if beside.is_file() else experts_dir.parent.parent / HOLDOUT_FILE


def cifar_fusion(run) -> dict:
    p, out = run.task_params, Path(run.output_dir)
    if "experts_dir" not in p:
        raise UserError("task_params.experts_dir is not set; point it at a cifar_experts run's checkpoints/<model>")
    experts_dir = Path(p["experts_dir"])
    fusion = p.get("fusion", "multiplicative")
    FUSION_HEADS.get(fusion)
    holdout_path = Path(p.get("holdout_path") or _default_holdout(experts_dir))
    if not holdout_path.is_file():
        raise UserError(f"fusion split {holdout_path} is missing; set task_params.holdout_path "
                        "or train the experts first")
    held = np.load(holdout_path)
    experts = [load_expert(experts_dir / f"expert_{i}_best.pth") for i in range(int(p.get("num_experts", 4)))]
    expert_meta = [torch.load(experts_dir / f"expert_{i}_best.pth", map_location="cpu") for i in range(len(experts))]
    arch = expert_meta[0]["model_name"]
    pl.seed_everything(run.seed, workers=True)
    data = TrainSubset(build_data(run.data), held)
    head_params = {"dim": int(p.get("fusion_dim", 64))}
    net = FusionNet(experts, fusion, data.num_classes, **head_params)
    fusion_lr = float(p.get("fusion_lr", run.optim.lr)) * math.sqrt(REFERENCE_DIM / net.fusion_input_dim)
    experts_lr = float(p.get("experts_lr", run.optim.lr / 10))
    module = FusionModule(net, experts_lr, fusion_lr, float(p.get("expert_loss_weight", 0.5)), run.optim.weight_decay)
    components = out / f"{arch}_fusions" / fusion
    csv_path = out / "csv_logs" / f"{arch}_fusions" / f"{arch}_{fusion}_training_log.csv"
    meta = {"fusion": fusion, "num_classes": data.num_classes, "head_params": head_params,
            "experts": [{k: m[k] for k in ("model_name", "model_params", "num_classes")} for m in expert_meta]}
    saver = CsvAndComponents(csv_path, components, meta)
    if run.trainer.gradient_clip_val is None:
        run.trainer.gradient_clip_val = 1.0
    fitter = trainer(run, out, f"{arch}_{fusion}", callbacks=[saver],
                     project=p.get("wandb_project", f"MCN_{arch}_Fusion"))  # seed 001's project per architecture
    fit_resuming(fitter, module, data, out, f"{arch}_{fusion}")
    record = {"task": "cifar_fusion", "model": arch, "fusion": fusion, "best_val_acc": saver.best,
              "experts_lr": experts_lr, "fusion_lr": fusion_lr, "components": str(components), "csv_log": str(csv_path),
              **speed_facts(fitter, run.data.num_workers)}
    return write_results(out, record)
