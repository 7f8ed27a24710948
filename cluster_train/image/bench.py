"""`python -m train bench`: throughput, step time and peak memory ->
benchmarks/results/<host>[-<gpu>]-<date>.json, written after every case; a case that fails (a strategy
this device cannot run) is a row naming its error.

Three kinds of rows, each case in fresh processes:
- strategy: every registered strategy trains the first model with the run defaults (on a GPU: bf16 + channels-last),
  on `ranks` ranks (1 for `single`);
- variant: each model, one rank, through the registered training loop (the Classifier in the Trainer `fit` builds
  for `task: classify`: its options, callbacks and loggers, cluster_train/image/speed.py and trainer.cuda_graphs'
  decision included, which the row records): fp32, bf16,
  bf16+channels_last, bf16+channels_last+compile (GPU only but fp32);
- plain: the same model, batch and data in a hand-written PyTorch loop (autocast, the same optimizer), at the
  settings of the fastest eager variant: `loop_vs_plain` in each row is the framework's cost as a ratio.

`steps` timed steps after `warmup` (default 50 after 15 on a GPU, where the warm-up holds trainer.cuda_graphs'
probe, the compile it may start and the graphs' recording; 100 after 3 on the CPU, whose ~20 ms steps would
otherwise be timed over 0.4 s). `repeats` (default 1 on a GPU, 5 on the CPU): the plain case and the variant at its
settings run alternately that many times, each run in fresh processes, so both sides see the same drift of a shared
machine; their rows keep every run's figures (`samples_per_s_runs`, `step_ms_runs`) and the medians as
`samples_per_s` and `step_ms`, and `loop_vs_plain` is the ratio of the two medians. Every other case runs once.

On a GPU the models are the seeds' at their real sizes (the CIFAR experts from experiments/cifar100_experts.yaml,
seed 002's MobileNet-v3 and EfficientNet-B0, ResNet-50 at 224 px); on the CPU one small model, so `make bench` stays
under 10 minutes. Inputs are random batches made once and reused (the input pipeline is `fit`'s InputWait).
"""
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from cluster_train.image.localrun import spawn

STRATEGY_ORDER = ["single", "ddp", "fsdp", "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload"]
VARIANTS = {  # name -> (precision, channels_last, compile)
    "fp32": ("32", False, False),
    "bf16": ("bf16-mixed", False, False),
    "bf16+channels_last": ("bf16-mixed", True, False),
    "bf16+channels_last+compile": ("bf16-mixed", True, True),
}
EAGER_BEST = "bf16+channels_last"  # the plain loop's settings on a GPU (fp32 on the CPU)
EXPERTS = Path(__file__).resolve().parents[2] / "experiments" / "cifar100_experts.yaml"  # a checkout's, not the cwd's


def gpu_models() -> dict:
    """label -> (builder, params, image size, batch): the seeds' models at their real sizes."""
    from cluster_train.shared import config as cfg

    experts = cfg.read(EXPERTS)
    sizes, batch = experts["task_params"]["model_sizes"], experts["data"]["batch_size"]
    models = {f"{name}_cifar100": (f"registry:{name}", dict(params), 32, batch) for name, params in sizes.items()}
    return {**models,
            "mobilenet_v3_small_224": ("torchvision:mobilenet_v3_small", {}, 224, 32),  # seed 002: 32 per GPU
            "efficientnet_b0_224": ("torchvision:efficientnet_b0", {}, 224, 16),  # seed 002's production batch
            "resnet50_224": ("torchvision:resnet50", {}, 224, 256)}  # NVIDIA's A100 AMP reference batch


CPU_MODELS = {"resnet_cifar_d8_w4": ("registry:resnet_cifar", {"depth": 8, "width": 4}, 32, 32)}


def build_model(builder: str, params: dict, num_classes: int) -> torch.nn.Module:
    source, name = builder.split(":")
    if source == "registry":
        from cluster_train.shared.models import MODELS

        return MODELS.build(name, num_classes=num_classes, **params)
    import torchvision.models

    return getattr(torchvision.models, name)(num_classes=num_classes, **params)


class ReusedBatches(torch.utils.data.Dataset):
    """`steps` batches drawn from two made once (pinned on GPUs): samples are indices and the collate function hands
    out a whole prepared batch, so no per-sample copy runs in the timed loop while the DataLoader keeps its batch
    sampler (DeepSpeed reads the batch size from it)."""

    def __init__(self, batch: int, size: int, num_classes: int, steps: int):
        g = torch.Generator().manual_seed(0)
        self.pool = [(torch.randn(batch, 3, size, size, generator=g),
                      torch.randint(0, num_classes, (batch,), generator=g))
                     for _ in range(2)]
        if torch.cuda.is_available():
            self.pool = [(x.pin_memory(), y.pin_memory()) for x, y in self.pool]
        self.batch, self.steps = batch, steps

    def __len__(self):
        return self.batch * self.steps

    def __getitem__(self, i):
        return i

    def collate(self, indices):
        return self.pool[(indices[0] // self.batch) % 2]


def _loader(case):
    from torch.utils.data import DataLoader

    data = ReusedBatches(case["batch"], case["size"], case["classes"], case["warmup"] + case["steps"])
    return DataLoader(data, batch_size=case["batch"], shuffle=False, collate_fn=data.collate)


def _setup(case) -> bool:
    cuda = torch.cuda.is_available()
    if not cuda:  # the same threads per rank in every case, so no case oversubscribes the cores
        torch.set_num_threads(case["threads"])
    torch.manual_seed(0)
    return cuda


def _sync(cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter()


def lightning_rank(rank, case):
    """The registered training loop: the Classifier in `task: classify`'s own Trainer
    (cluster_train.image.trainer.build_trainer: the run's options, speed callbacks, RunGuard, checkpoint callbacks, CSV
    and TensorBoard loggers, writing into a temporary directory), with the run defaults but one epoch, no validation and
    the bench's batches."""
    import tempfile

    from pytorch_lightning.callbacks import Callback

    from cluster_train.shared.config import OptimConfig, RunConfig, TrainerConfig
    from cluster_train.image.cuda_graphs import CudaGraphs
    from cluster_train.image.lit import Classifier
    from cluster_train.image.memory import peak_host_mb, state_bytes
    from cluster_train.image.trainer import build_trainer

    cuda = _setup(case)
    run = RunConfig(trainer=TrainerConfig(accelerator="gpu" if cuda else "cpu", devices=case["ranks"],
                                          strategy=case["strategy"], precision=case["precision"],
                                          channels_last=case["channels_last"], compile=case["compile"], max_epochs=1,
                                          limit_val_batches=0))
    marks = {}

    class Clock(Callback):  # one synchronisation after the warm-up steps and one at the end: none in between
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == case["warmup"]:
                marks["start"] = _sync(cuda)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == case["warmup"] + case["steps"] - 1:
                marks["end"] = _sync(cuda)

    net = build_model(case["builder"], case["params"], case["classes"])
    module = Classifier(net, OptimConfig(name="sgd", lr=0.01, scheduler="none"))
    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(run, Path(out), callbacks=[Clock()],
                                use_distributed_sampler=False)  # each rank its own batches, as the plain loop
        trainer.fit(module, _loader(case))
    graphs = next(c for c in trainer.callbacks if isinstance(c, CudaGraphs)).facts()
    return {"step_s": (marks["end"] - marks["start"]) / case["steps"], "host_peak_mb": peak_host_mb(),
            "device_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
            "cuda_graphs": graphs, **state_bytes(module, trainer.optimizers[0])}


def plain_rank(rank, case):
    """The same model, optimizer, batches and settings in the shortest PyTorch loop: no framework at all."""
    import torch.nn.functional as F

    from cluster_train.shared.config import OptimConfig
    from cluster_train.image.memory import peak_host_mb
    from cluster_train.shared.optimizers import build_optimizer
    from cluster_train.image.speed import to_channels_last

    cuda = _setup(case)
    device = torch.device("cuda" if cuda else "cpu")
    net = build_model(case["builder"], case["params"], case["classes"]).to(device)
    if case["channels_last"]:
        to_channels_last(net)
    if case["compile"]:
        net.compile()
    opt = build_optimizer(net.parameters(), OptimConfig(name="sgd", lr=0.01, scheduler="none"))
    bf16 = case["precision"] == "bf16-mixed"
    for i, (x, y) in enumerate(_loader(case)):
        if i == case["warmup"]:
            start = _sync(cuda)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {"step_s": (_sync(cuda) - start) / case["steps"], "host_peak_mb": peak_host_mb(),
            "device_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}


def run_case(case) -> dict:
    started = time.time()
    ranks = spawn(plain_rank if case["kind"] == "plain" else lightning_rank, case["ranks"], case)
    step = max(r["step_s"] for r in ranks)  # the slowest rank sets the pace
    peak = [r["device_peak_mb"] for r in ranks if r["device_peak_mb"] is not None]
    row = {"kind": case["kind"], "model": case["label"], "strategy": case["strategy"], "variant": case["variant"],
           "precision": case["precision"], "ranks": case["ranks"], "batch_per_rank": case["batch"],
           "image_size": case["size"], "samples_per_s": round(case["batch"] * case["ranks"] / step, 1),
           "step_ms": round(step * 1000, 2), "host_peak_mb_per_rank": round(max(r["host_peak_mb"] for r in ranks), 1),
           "device_peak_mb_per_rank": round(max(peak), 1) if peak else None, "wall_s": round(time.time() - started, 1)}
    if ranks[0].get("cuda_graphs"):  # the registered loop's decision (trainer.cuda_graphs: auto) and its probe
        row["cuda_graphs"] = ranks[0]["cuda_graphs"]
    if "total_bytes" in ranks[0]:
        row.update(state_bytes_per_rank=max(r["total_bytes"] for r in ranks),
                   param_bytes_per_rank=max(r["param_bytes"] for r in ranks),
                   optimizer_state_bytes_per_rank=max(r["optimizer_state_bytes"] for r in ranks))
    return row


def cases(models: dict, strategies: list, variants: list, ranks: int, batch, steps: int, warmup: int, cuda: bool):
    threads = max(1, (os.cpu_count() or 1) // ranks)
    for n, (label, (builder, params, size, own_batch)) in enumerate(models.items()):
        base = {"label": label, "builder": builder, "params": params, "size": size, "batch": batch or own_batch,
                "classes": 1000 if size > 32 else 100, "threads": threads, "steps": steps, "warmup": warmup}
        defaults = VARIANTS[EAGER_BEST if cuda else "fp32"]
        if n == 0:  # the strategies on the first model
            for strategy in strategies:
                yield {**base, **_settings(defaults), "kind": "strategy", "strategy": strategy, "variant": "default",
                       "ranks": 1 if strategy == "single" else ranks}
        for variant in variants:
            yield {**base, **_settings(VARIANTS[variant]), "kind": "variant", "strategy": "single",
                   "variant": variant, "ranks": 1}
        yield {**base, **_settings(defaults), "kind": "plain", "strategy": "none",
               "variant": EAGER_BEST if cuda else "fp32", "ranks": 1}


def _settings(variant) -> dict:
    precision, channels_last, compile = variant
    return {"precision": precision, "channels_last": channels_last, "compile": compile}


def compare(rows: list) -> list:
    """vs_fp32: each variant against the model's fp32 row; loop_vs_plain: the registered loop against the plain one
    at the same settings (rows that failed take part in neither)."""
    measured = [r for r in rows if "error" not in r]
    for row in measured:
        same = [r for r in measured if r["model"] == row["model"] and r["ranks"] == 1]
        fp32 = next((r for r in same if r["kind"] == "variant" and r["variant"] == "fp32"), None)
        plain = next((r for r in same if r["kind"] == "plain"), None)
        if row["kind"] == "variant" and fp32:
            row["vs_fp32"] = round(row["samples_per_s"] / fp32["samples_per_s"], 3)
        if row["kind"] == "variant" and plain and row["variant"] == plain["variant"]:
            row["loop_vs_plain"] = round(row["samples_per_s"] / plain["samples_per_s"], 3)  # of the medians
            runs, plain_runs = row.get("samples_per_s_runs", []), plain.get("samples_per_s_runs", [])
            if len(runs) > 1 and len(runs) == len(plain_runs):  # run i of each side ran one after the other
                row["loop_vs_plain_runs"] = [round(a / b, 3) for a, b in zip(runs, plain_runs)]
    return rows


def schedule(planned: list, repeats: int) -> list:
    """The groups of cases `bench` measures, in order: each case alone and once, except each model's plain case and
    the variant at its settings, which form one group run alternately `repeats` times (a plain case with no such
    variant, `--variants` without it, is repeated alone)."""
    def partner(case):
        return next((p for p in planned if p["kind"] == "plain" and p["label"] == case["label"]
                     and p["variant"] == case["variant"]), None)

    paired = [partner(c) for c in planned if c["kind"] == "variant"]
    groups = []
    for case in planned:
        if case["kind"] == "variant" and partner(case) is not None:
            groups.append(([case, partner(case)], repeats))
        elif case["kind"] == "plain":
            if not any(p is case for p in paired):
                groups.append(([case], repeats))
        else:
            groups.append(([case], 1))
    return groups


def median_row(runs: list) -> dict:
    """One case's row from its runs: the median samples/s and step time with every run's figures beside them, the
    largest memory, the summed wall time. A run that failed makes the row its error (the case stopped repeating)."""
    failed = [r for r in runs if "error" in r]
    if failed or len(runs) == 1:
        return {**failed[0], "runs": len(runs)} if failed else runs[0]
    row = dict(runs[0])
    speeds, steps = [r["samples_per_s"] for r in runs], [r["step_ms"] for r in runs]
    row.update(samples_per_s=round(statistics.median(speeds), 1), step_ms=round(statistics.median(steps), 2),
               host_peak_mb_per_rank=max(r["host_peak_mb_per_rank"] for r in runs),
               wall_s=round(sum(r["wall_s"] for r in runs), 1), runs=len(runs), samples_per_s_runs=speeds,
               step_ms_runs=steps)
    peaks = [r["device_peak_mb_per_rank"] for r in runs if r["device_peak_mb_per_rank"] is not None]
    row["device_peak_mb_per_rank"] = max(peaks) if peaks else None
    return row


def bench(models=None, strategies=None, variants=None, ranks: int = 2, batch=None, steps=None, warmup=None,
          repeats=None, out_dir: str = "benchmarks/results") -> Path:
    cuda = torch.cuda.is_available()
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if cuda else "cpu")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.expanduser("~/.cache/torch_extensions"))
    known = gpu_models() if cuda else CPU_MODELS
    chosen = known if models is None else {k: v for k, v in {**gpu_models(), **CPU_MODELS}.items()
                                           if k in _names(models)}
    if cuda:
        ranks = min(ranks, torch.cuda.device_count())
    variants = (list(VARIANTS) if cuda else ["fp32"]) if variants is None else _names(variants)
    strategies = STRATEGY_ORDER if strategies is None else _names(strategies)
    repeats = max(1, int(repeats if repeats is not None else 1 if cuda else 5))
    steps = int(steps if steps is not None else 50 if cuda else 100)  # short steps: a longer window
    # on a GPU the warm-up holds trainer.cuda_graphs' probe, the compile it may start and the graphs' recording
    warmup = int(warmup if warmup is not None else 15 if cuda else 3)
    started, rows = time.time(), []
    out = Path(out_dir) / f"{socket.gethostname()}{_device_tag(cuda)}-{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for group, times in schedule(list(cases(chosen, strategies, variants, ranks, batch, steps, warmup, cuda)), repeats):
        runs = [[] for _ in group]
        for n in range(times):  # alternately: case 1, case 2, case 1, ...
            for case, done in zip(group, runs):
                if done and "error" in done[-1]:
                    continue  # a case that failed fails again: no repeat
                done.append(_measured(case))
                print(_row(done[-1]) + (f"  (run {n + 1}/{times})" if times > 1 else ""), flush=True)
                # after every run: a bench cut short keeps what it measured
                _write(out, cuda, started, steps, warmup, repeats, rows + [median_row(r) for r in runs if r])
        rows += [median_row(r) for r in runs]
        if times > 1:
            for row in compare(list(rows))[-len(group):]:
                print(f"median of {times}: " + _row(row) + _ratio(row), flush=True)
    print(f"wrote {out} in {round(time.time() - started, 1)} s")
    return out


def _ratio(row) -> str:
    return f"  loop_vs_plain {row['loop_vs_plain']}" if "loop_vs_plain" in row else ""


def _measured(case) -> dict:
    """The case's row, or one naming its error: one case that fails (a strategy on this device) stops no other."""
    try:
        return run_case(case)
    except Exception as err:  # a rank's exception arrives as torch.multiprocessing's ProcessRaisedException
        last = [line for line in str(err).strip().splitlines() if line.strip()][-1:] or [type(err).__name__]
        return {"kind": case["kind"], "model": case["label"], "strategy": case["strategy"],
                "variant": case["variant"], "ranks": case["ranks"], "error": last[0].strip()[:300]}


def _write(out: Path, cuda: bool, started: float, steps: int, warmup: int, repeats: int, rows: list) -> None:
    result = {
        "host": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "driver": _driver() if cuda else None,
        "cpu_count": os.cpu_count(), "command": " ".join(["python", "-m", "train", *sys.argv[1:]]),
        "torch": torch.__version__, "cuda": torch.version.cuda, "total_s": round(time.time() - started, 1),
        "steps": steps, "warmup": warmup, "repeats": repeats, "rows": compare(rows),
        "note": "CPU: gloo; fsdp and zero* = Lightning's FSDP and DeepSpeed strategies with their CUDA checks "
                "relaxed; state bytes = live parameter + optimizer tensors on the rank (cluster_train.image.memory)",
    }
    out.write_text(json.dumps(result, indent=2) + "\n")


def _driver():
    """The NVIDIA driver's version (torch reports the CUDA runtime's, not the driver's)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out else None


def _device_tag(cuda: bool) -> str:
    """'-h200' for an NVIDIA H200: the file names the GPU its figures came from."""
    if not cuda:
        return ""
    words = torch.cuda.get_device_name(0).lower().replace("nvidia", "").split()
    return "-" + (words[0] if words else "gpu")


def _names(value) -> list:
    """fire gives "a,b" as a tuple and "a" as a string."""
    names = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(",")
    return [n for n in names if n]  # --strategies= : none


def _row(r) -> str:
    if "error" in r:
        return (f"{r['kind']:8s} {r['model']:28s} {r['strategy']:14s} {r['variant']:27s} "
                f"ranks {r['ranks']}  FAILED: {r['error']}")
    dev = "" if r["device_peak_mb_per_rank"] is None else f" dev {r['device_peak_mb_per_rank']:>8.1f} MB"
    return (f"{r['kind']:8s} {r['model']:28s} {r['strategy']:14s} {r['variant']:27s} ranks {r['ranks']}  "
            f"{r['samples_per_s']:>9.1f} samples/s  {r['step_ms']:>8.1f} ms/step  "
            f"host {r['host_peak_mb_per_rank']:>7.1f} MB{dev}")
