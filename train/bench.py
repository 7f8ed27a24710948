"""`python -m train bench`: throughput, step time and peak memory per model and strategy -> bench/results/<host>-<date>.json.

Each strategy trains a few steps on random CIFAR-shaped data in fresh processes (1 rank for `single`, else `ranks`),
through the same registry and Trainer options as `fit`. On CUDA it also runs bf16-mixed with channels_last and
torch.compile (where torch has it) against the plain fp32 run of the same model.
"""
import datetime
import json
import os
import socket
import time
from pathlib import Path

import torch

from train.localrun import spawn

STRATEGY_ORDER = ["single", "ddp", "fsdp", "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload"]
DEFAULT_MODELS = {"resnet_cifar_d8_w4": ("resnet_cifar", {"depth": 8, "width": 4}),
                  "resnet_cifar_d14_w16": ("resnet_cifar", {"depth": 14, "width": 16})}


def _worker(rank, case):
    import pytorch_lightning as pl
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from train.config import OptimConfig, TrainerConfig
    from train.lit import Classifier
    from train.memory import peak_host_mb, state_bytes
    from train.models import MODELS
    from train.strategies import STRATEGIES

    cuda = torch.cuda.is_available()
    accelerator = "gpu" if cuda else "cpu"
    if not cuda:  # the same threads per rank in every case (single included), so no case oversubscribes the cores
        torch.set_num_threads(case["threads"])
    torch.manual_seed(0)
    name, params = case["model"]
    net = MODELS.build(name, num_classes=100, **params)
    if case.get("channels_last"):
        net = net.to(memory_format=torch.channels_last)
    if case.get("compile"):
        net = torch.compile(net)
    optim = OptimConfig(name="sgd", lr=0.01, scheduler="none")
    t = TrainerConfig(accelerator=accelerator, devices=case["ranks"], strategy=case["strategy"],
                      precision=case["precision"])
    times = []

    class Timed(Classifier):
        def on_train_batch_start(self, batch, batch_idx):
            if cuda:
                torch.cuda.synchronize()
            self._t0 = time.perf_counter()

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self._t0)

        def training_step(self, batch, batch_idx):
            x, y = batch
            if case.get("channels_last"):
                x = x.contiguous(memory_format=torch.channels_last)
            return F.cross_entropy(self.model(x), y)

    n = case["batch"] * (case["warmup"] + case["steps"])
    g = torch.Generator().manual_seed(rank)
    data = TensorDataset(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 100, (n,), generator=g))
    module = Timed(net, optim)
    trainer = pl.Trainer(accelerator=accelerator, devices=case["ranks"],
                         strategy=STRATEGIES.build(case["strategy"], accelerator=accelerator, trainer=t),
                         precision=case["precision"], max_steps=case["warmup"] + case["steps"], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_val_batches=0, use_distributed_sampler=False)
    trainer.fit(module, DataLoader(data, batch_size=case["batch"]))
    measured = times[case["warmup"]:]
    step = sum(measured) / len(measured)
    return {"step_s": step, "host_peak_mb": peak_host_mb(),
            "device_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
            **state_bytes(module, trainer.optimizers[0])}


def run_case(case) -> dict:
    started = time.time()
    ranks = spawn(_worker, case["ranks"], case)
    step = max(r["step_s"] for r in ranks)  # the slowest rank sets the pace
    return {
        "model": case["label"], "strategy": case["strategy"], "variant": case.get("variant", "fp32"),
        "precision": case["precision"], "ranks": case["ranks"], "batch_per_rank": case["batch"],
        "samples_per_s": round(case["batch"] * case["ranks"] / step, 1), "step_ms": round(step * 1000, 2),
        "host_peak_mb_per_rank": round(max(r["host_peak_mb"] for r in ranks), 1),
        "device_peak_mb_per_rank": None if ranks[0]["device_peak_mb"] is None
        else round(max(r["device_peak_mb"] for r in ranks), 1),
        "state_bytes_per_rank": max(r["total_bytes"] for r in ranks),
        "param_bytes_per_rank": max(r["param_bytes"] for r in ranks),
        "optimizer_state_bytes_per_rank": max(r["optimizer_state_bytes"] for r in ranks),
        "wall_s": round(time.time() - started, 1),
    }


def bench(models=None, strategies=None, ranks: int = 2, batch: int = 32, steps: int = 5, warmup: int = 2,
          out_dir: str = "bench/results") -> Path:
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not torch.cuda.is_available() else "cuda")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/torch_extensions"))
    cuda = torch.cuda.is_available()
    if cuda:
        ranks = min(ranks, torch.cuda.device_count())
    if models is None:  # on CPU only the smallest model, so `make bench` stays well under 10 minutes
        models = list(DEFAULT_MODELS) if cuda else list(DEFAULT_MODELS)[:1]
    chosen = {k: v for k, v in DEFAULT_MODELS.items() if k in _names(models)}
    names = STRATEGY_ORDER if strategies is None else _names(strategies)
    started, rows = time.time(), []
    for label, model in chosen.items():
        base = {"label": label, "model": model, "threads": max(1, (os.cpu_count() or 1) // ranks), "batch": batch, "steps": steps, "warmup": warmup, "precision": "32"}
        for strategy in names:
            rows.append(run_case({**base, "strategy": strategy, "ranks": 1 if strategy == "single" else ranks}))
            print(_row(rows[-1]), flush=True)
        if cuda:  # bf16 + channels_last and torch.compile against the fp32 single-GPU run above
            extra = [{"variant": "bf16+channels_last", "precision": "bf16-mixed", "channels_last": True}]
            if hasattr(torch, "compile"):
                extra.append({"variant": "compile", "compile": True})
            for e in extra:
                rows.append(run_case({**base, **e, "strategy": "single", "ranks": 1}))
                print(_row(rows[-1]), flush=True)
    result = {
        "host": socket.gethostname(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "cpu_count": os.cpu_count(),
        "torch": torch.__version__, "cpu_threads_per_rank": max(1, (os.cpu_count() or 1) // ranks), "total_s": round(time.time() - started, 1), "rows": rows,
        "note": "CPU: gloo; fsdp and zero* = Lightning's FSDP and DeepSpeed strategies with their CUDA checks "
                "relaxed; state bytes = live parameter + optimizer tensors on the rank (train.memory)",
    }
    out = Path(out_dir) / f"{socket.gethostname()}-{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out} in {result['total_s']} s")
    return out


def _names(value) -> list:
    """fire gives "a,b" as a tuple and "a" as a string."""
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(",")


def _row(r) -> str:
    dev = "" if r["device_peak_mb_per_rank"] is None else f" dev {r['device_peak_mb_per_rank']:>8.1f} MB"
    return (f"{r['model']:22s} {r['strategy']:14s} {r['variant']:18s} ranks {r['ranks']}  "
            f"{r['samples_per_s']:>9.1f} samples/s  {r['step_ms']:>8.1f} ms/step  host {r['host_peak_mb_per_rank']:>7.1f} MB"
            f"{dev}  state {r['state_bytes_per_rank'] / 1024:>8.1f} KiB")
