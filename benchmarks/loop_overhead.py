"""What the registered training loop costs per step beyond a plain PyTorch loop, piece by piece, and what each of issue
29's removals bought: `make bench-loop` -> benchmarks/results/<host>-<date>-loop.json.

One process, one thread, the same batches (cluster_train.image.bench.ReusedBatches), model and optimizer on every side;
each variant trains `steps` timed steps after 20, the variants alternate for `rounds` rounds (every other round in
reverse order) and each one's median is kept. A small model (one Linear layer) makes the framework's cost per step stand
out of the noise of this 2-core VM: it is the same per step whatever the model.

- plain: the hand-written loop (as cluster_train.image.bench.plain_rank);
- lightning: a bare Lightning Trainer (no logger, checkpoint, summary, progress bar; one clock callback) and a
  training_step that logs nothing: Lightning's own loop;
- fit_trainer: the Trainer `fit` builds (cluster_train.image.trainer.build_trainer: its callbacks, loggers, checkpoints,
  summary), the same silent training_step;
- fit: that Trainer and the Classifier as they are;
- undo_1 .. undo_4: `fit` with one removal undone: (1) train/loss on a progress bar nobody draws, (2) both metrics
  logged (and the accuracy computed) at every step instead of the loggers' steps, (3) Lightning's default profiler
  instead of cluster_train.image.trainer.NoProfiler, (4) nn.Module's
  __setattr__ for the hook name Lightning sets around each hook;
- before: all four undone (cluster_train/image/lit.py and cluster_train/image/trainer.py before issue 29).
"""
import argparse
import contextlib
import datetime
import gc
import io
import json
import logging
import os
import socket
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's cluster_train package, from any directory

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from pytorch_lightning.callbacks import Callback  # noqa: E402
from pytorch_lightning.profilers import PassThroughProfiler  # noqa: E402

from cluster_train.image.bench import ReusedBatches  # noqa: E402
from cluster_train.shared.config import OptimConfig, RunConfig, TrainerConfig  # noqa: E402
from cluster_train.image.lit import Classifier, logging_step  # noqa: E402
from cluster_train.shared.optimizers import build_optimizer  # noqa: E402
from cluster_train.image.trainer import NoProfiler, build_trainer  # noqa: E402

WARMUP = 20
OPTIM = OptimConfig(name="sgd", lr=0.01, scheduler="none")
MODEL = "one Linear layer, 3x32x32 -> 100, batch 32, SGD (momentum 0.9, weight decay 5e-4)"


class Silent(Classifier):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.model(x), y)


class EveryStep(Classifier):
    """The training_step before removal 2: both metrics at every step (the loss on the bar only with `bar`)."""
    bar = False

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        loss = F.cross_entropy(logits, y)
        self.log("train/loss", loss, prog_bar=self.bar)
        self.log("train/acc", (logits.argmax(1) == y).float().mean())
        return loss


class Bar(Classifier):
    """Removal 1 undone: train/loss on the progress bar (on the loggers' steps, as now)."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        loss = F.cross_entropy(logits, y)
        if logging_step(self.trainer):
            self.log("train/loss", loss, prog_bar=True)
            self.log("train/acc", (logits.argmax(1) == y).float().mean())
        return loss


class ModuleSetattr(Classifier):
    """Removal 4 undone."""
    __setattr__ = torch.nn.Module.__setattr__


class Before(EveryStep):
    """cluster_train/image/lit.py's Classifier before issue 29."""
    bar = True
    __setattr__ = torch.nn.Module.__setattr__


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 100))


def loader(steps: int):
    data = ReusedBatches(32, 32, 100, WARMUP + steps)
    return torch.utils.data.DataLoader(data, batch_size=32, shuffle=False, collate_fn=data.collate)


def plain(steps: int) -> float:
    m = net()
    opt = build_optimizer(m.parameters(), OPTIM)  # the Classifier's: SGD with the config's momentum, weight decay
    for i, (x, y) in enumerate(loader(steps)):
        if i == WARMUP:
            start = time.perf_counter()
        loss = F.cross_entropy(m(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def looped(module_class, fit_trainer: bool, **overrides):
    def run(steps: int) -> float:
        marks = {}

        class Clock(Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                if batch_idx == WARMUP:
                    marks["start"] = time.perf_counter()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if batch_idx == WARMUP + steps - 1:
                    marks["end"] = time.perf_counter()

        module = module_class(net(), OPTIM)
        with tempfile.TemporaryDirectory() as out:
            if fit_trainer:
                run_config = RunConfig(trainer=TrainerConfig(accelerator="cpu", strategy="single", max_epochs=1,
                                                             limit_val_batches=0))
                trainer = build_trainer(run_config, Path(out), callbacks=[Clock()], **overrides)
            else:
                trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, callbacks=[Clock()],
                                     enable_checkpointing=False, enable_progress_bar=False, profiler=NoProfiler(),
                                     enable_model_summary=False, limit_val_batches=0, default_root_dir=out)
            with contextlib.redirect_stdout(io.StringIO()):  # fit's callbacks print where ranks ran, each epoch
                trainer.fit(module, loader(steps))
        return (marks["end"] - marks["start"]) / steps
    return run


LIGHTNINGS_PROFILER = {"profiler": PassThroughProfiler()}  # removal 3 undone: the Trainer's default
VARIANTS = {
    "plain": plain,
    "lightning": looped(Silent, fit_trainer=False),
    "fit_trainer": looped(Silent, fit_trainer=True),
    "fit": looped(Classifier, fit_trainer=True),
    "undo_1": looped(Bar, fit_trainer=True),
    "undo_2": looped(EveryStep, fit_trainer=True),
    "undo_3": looped(Classifier, fit_trainer=True, **LIGHTNINGS_PROFILER),
    "undo_4": looped(ModuleSetattr, fit_trainer=True),
    "before": looped(Before, fit_trainer=True, **LIGHTNINGS_PROFILER),
}
# what each difference is: (variant, minus variant, meaning)
DIFFERENCES = [
    ("lightning", "plain", "Lightning's own loop (hooks, closure, optimizer wrapper, batch transfer)"),
    ("fit_trainer", "lightning", "fit's callbacks and loggers (RunGuard, InputWait, FastLayout, 2 ModelCheckpoint, "
                                 "AnnounceRanks, ModelSummary), nothing logged"),
    ("fit", "fit_trainer", "train/loss and train/acc logged every log_every_n_steps (50) steps, CSV + TensorBoard"),
    ("fit", "plain", "what is left: the registered loop's cost per step"),
    ("undo_1", "fit", "removal 1 bought: train/loss on a progress bar nobody draws (one .item() a step)"),
    ("undo_2", "fit", "removal 2 bought: both metrics logged and the accuracy computed at every step"),
    ("undo_3", "fit", "removal 3 bought: Lightning's default profiler, a context manager around every hook call"),
    ("undo_4", "fit", "removal 4 bought: nn.Module.__setattr__ for the hook name, ~44 times a step"),
    ("before", "fit", "all four"),
    ("before", "plain", "the registered loop's cost per step before them"),
]


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="timed steps per run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    steps = args.steps
    names = args.variants.split(",")
    torch.set_num_threads(1)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    started, samples = time.time(), {n: [] for n in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:  # every other round backwards: no variant always follows one
            gc.collect()  # the previous variant's garbage is not collected inside this one's timed steps
            samples[name].append(round(VARIANTS[name](steps) * 1e6, 1))
    medians = {n: round(statistics.median(v), 1) for n, v in samples.items()}
    differences = [{"variant": a, "minus": b, "us_per_step": round(medians[a] - medians[b], 1), "what": what}
                   for a, b, what in DIFFERENCES if a in medians and b in medians]
    result = {"host": socket.gethostname(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
              timespec="seconds"), "cpu_count": os.cpu_count(), "threads": 1, "torch": torch.__version__,
              "lightning": pl.__version__,
              "command": "python benchmarks/loop_overhead.py " + " ".join(argv or sys.argv[1:]),
              "model": MODEL, "steps": steps, "warmup": WARMUP,
              "rounds": args.rounds, "total_s": round(time.time() - started, 1),
              "us_per_step": {n: {"median": medians[n], "runs": samples[n]} for n in names},
              "differences": differences}
    out = Path(args.out_dir) / f"{socket.gethostname()}-{datetime.date.today().isoformat()}-loop.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for n in names:
        print(f"{n:18s} {medians[n]:9.1f} us/step  {samples[n]}")
    for d in differences:
        print(f"{d['variant']:>18s} - {d['minus']:18s} {d['us_per_step']:+8.1f} us/step  {d['what']}")
    print(f"wrote {out} in {result['total_s']} s")
    return out


if __name__ == "__main__":
    main()
