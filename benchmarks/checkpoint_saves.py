"""Issue 43: does a mid-epoch save (trainer.checkpoint_every) stall training? -> benchmarks/results/<host>-<date>-
checkpoint-saves.json.

A CPU model of ~8M parameters (a 32 MB checkpoint with its Adam state ~96 MB) trains 60 steps, saving every 10, once
with the saves written in the background (Lightning's AsyncCheckpointIO around the atomic IO: what single and ddp get)
and once synchronously (what DeepSpeed and FSDP get). The figures: the median time of the step that saved, and of the
step after it (a background save may still be writing), against the median of the others; the issue's target is
within 20 %.
"""
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from pytorch_lightning.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster_train.shared import config as cfg  # noqa: E402
from cluster_train.image import trainer as trainers  # noqa: E402
from cluster_train.image.lit import Classifier  # noqa: E402

STEPS, EVERY, WIDTH = 60, 10, 1400


class StepClock(Callback):
    def __init__(self):
        self.ends = []

    def on_train_batch_end(self, trainer, *args):
        self.ends.append(time.perf_counter())


def timed(mode: str, out: Path) -> dict:
    trainers.ASYNC_SAVES = ("single", "ddp") if mode == "async" else ()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), *[
        m for _ in range(3) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())], torch.nn.Linear(WIDTH, 10))
    data = TensorDataset(torch.randn(STEPS * 32, WIDTH), torch.randint(0, 10, (STEPS * 32,)))
    run = cfg.resolve({"output_dir": str(out), "optim": {"name": "adamw", "lr": 1e-3, "scheduler": "none"},
                       "trainer": {"accelerator": "cpu", "strategy": "single", "max_epochs": 1,
                                   "checkpoint_every": EVERY, "export_weights": False}})
    clock = StepClock()
    trainer = trainers.build_trainer(run, out, callbacks=[clock], logger=False, limit_val_batches=0)
    trainer.fit(Classifier(net, run.optim), DataLoader(data, batch_size=32))
    steps = [b - a for a, b in zip(clock.ends, clock.ends[1:])]  # steps[i]: step i + 2's time
    # the clock's batch end comes before the checkpoint callbacks' (Lightning runs those last): step k's save is timed
    # in step k + 1 (steps[k - 1]), and step k + 2 runs while a background save may still be writing
    saving = [s for i, s in enumerate(steps) if (i + 1) % EVERY == 0]
    after = [s for i, s in enumerate(steps) if (i + 1) % EVERY == 1 and i > 0]
    others = [s for i, s in enumerate(steps[5:], 5) if (i + 1) % EVERY not in (0, 1)]
    ms = lambda values: round(1000 * statistics.median(values), 1)  # noqa: E731
    return {"mode": mode, "steps": len(steps), "saves": len(saving), "step_ms_saving": ms(saving),
            "step_ms_after": ms(after), "step_ms_others": ms(others),
            "ratio_saving": round(ms(saving) / ms(others), 3), "ratio_after": round(ms(after) / ms(others), 3),
            "checkpoint_mb": round((out / "checkpoints" / "last.ckpt").stat().st_size / 2**20, 1)}


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("async", "sync"):
            rows.append(timed(mode, Path(tmp) / mode))
            print(json.dumps(rows[-1]), flush=True)
    path = ROOT / "benchmarks" / "results" / f"{socket.gethostname()}-{time.strftime('%Y-%m-%d')}-checkpoint-saves.json"
    path.write_text(json.dumps({"torch": torch.__version__, "cpus": torch.get_num_threads(), "rows": rows},
                               indent=2) + "\n")
    print(path)


if __name__ == "__main__":
    main()
