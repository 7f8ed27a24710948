"""A character-level GPT trained in nanoGPT's shape (train.py there): settings as globals, overridden by --key=value;
DDP when RANK is set (torchrun, or cluster-train under any launch shape); batches drawn at random from train.bin
through numpy.memmap. What cluster-train adds is three things, each a few lines (see docs/how-to/own-code.md):
- the data comes from $CT_DATA_ROOT (the directory bound read-only with --data), else data_dir;
- resume: cluster_train.image.resume saves at the time-limit warning, requeues, and loads on the next start;
- results: $CT_RUN_DIR/metrics.csv (a row per evaluation) and results.json (the final numbers) for report/compare.

    python prepare.py --demo data/ && python train.py --max_iters=200     # on a laptop (out/, ./checkpoints)
"""
import ast
import csv
import json
import math
import os
import pickle
import sys
import time

import numpy as np
import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from cluster_train.image.resume import Checkpointer
from model import GPT, GPTConfig

# -----------------------------------------------------------------------------
# settings (nanoGPT's shakespeare_char config, scaled down for a CPU); override with --key=value
data_dir = os.environ.get("CT_DATA_ROOT", "data")  # train.bin, val.bin, meta.pkl (prepare.py); --data binds it
out_dir = os.environ.get("CT_RUN_DIR", "out")  # metrics.csv, results.json
eval_interval = 100
eval_iters = 20
log_interval = 10
batch_size = 12
block_size = 64
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.1
learning_rate = 1e-3
max_iters = 2000
warmup_iters = 100
min_lr = 1e-4
seed = 1337
# -----------------------------------------------------------------------------


def configure(argv):
    """nanoGPT's configurator, in short: --key=value sets a global above, its type kept."""
    for arg in argv:
        key, sep, value = arg[2:].partition("=")
        if not arg.startswith("--") or not sep or key not in SETTINGS:
            sys.exit(f"train.py: error: {arg!r}: give --key=value with key one of {', '.join(SETTINGS)}")
        try:
            parsed = ast.literal_eval(value)
        except (SyntaxError, ValueError):
            parsed = value  # a string (a path)
        if type(parsed) is not type(globals()[key]) and not (isinstance(parsed, int) and key in FLOATS):
            sys.exit(f"train.py: error: --{key}={value}: a {type(globals()[key]).__name__} is needed")
        globals()[key] = type(globals()[key])(parsed)


SETTINGS = [k for k, v in dict(globals()).items() if not k.startswith("_") and isinstance(v, (int, float, str))]
FLOATS = [k for k in SETTINGS if isinstance(globals()[k], float)]
configure(sys.argv[1:])

# DDP as nanoGPT sets it up: one process per GPU (or CPU rank), gloo where there is no GPU
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    cuda = torch.cuda.is_available()
    init_process_group(backend="nccl" if cuda else "gloo")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local_rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
else:
    rank, device = 0, "cuda" if torch.cuda.is_available() else "cpu"
master_process = rank == 0
torch.manual_seed(seed + rank)  # each rank draws its own batches


def get_batch(split):
    # a new memmap every batch, as nanoGPT does (numpy keeps an old one's pages otherwise)
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ("train", "val"):
        out[split] = torch.stack([model(*get_batch(split))[1] for _ in range(eval_iters)]).mean().item()
    model.train()
    return out


def get_lr(it):
    """Linear warmup, then cosine decay to min_lr at max_iters (nanoGPT's schedule)."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(ratio, 1.0))) * (learning_rate - min_lr)


def metrics_rows(start):
    """metrics.csv, opened to append; rows at `start` or later dropped (logged after the checkpoint we resume from,
    by a segment killed before it could save: we train those steps again)."""
    path = os.path.join(out_dir, "metrics.csv")
    if os.path.isfile(path):
        with open(path, newline="") as f:
            kept = [row for row in csv.DictReader(f) if int(row["step"]) < start]
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, FIELDS).writeheader()
            csv.DictWriter(f, FIELDS).writerows(kept)
    new = not os.path.isfile(path)
    f = open(path, "a", newline="")
    writer = csv.DictWriter(f, FIELDS)
    if new:
        writer.writeheader()
    return f, writer


FIELDS = ["step", "train/loss", "val/loss", "lr"]
with open(os.path.join(data_dir, "meta.pkl"), "rb") as f:
    vocab_size = pickle.load(f)["vocab_size"]
model = GPT(GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                      dropout=dropout)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.99))
raw_model = model
if ddp:
    model = DDP(model, device_ids=[local_rank] if device.startswith("cuda") else None)

# resume: last.ckpt in $CT_CHECKPOINT_DIR (./checkpoints outside cluster-train), when there is one
ckpt = Checkpointer(model=raw_model, optimizer=optimizer)
iter_num = ckpt.load()
best_val_loss = ckpt.extra.get("best_val_loss", float("inf"))
if master_process:
    os.makedirs(out_dir, exist_ok=True)
    metrics_file, metrics = metrics_rows(iter_num)

t0 = time.time()
while iter_num < max_iters:
    lr = get_lr(iter_num)
    for group in optimizer.param_groups:
        group["lr"] = lr
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        best_val_loss = min(best_val_loss, losses["val"])
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        metrics.writerow({"step": iter_num, "train/loss": losses["train"], "val/loss": losses["val"], "lr": lr})
        metrics_file.flush()
    X, Y = get_batch("train")
    _, loss = model(X, Y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if iter_num % log_interval == 0 and master_process:
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {(time.time() - t0) * 1000:.0f} ms", flush=True)
        t0 = time.time()
    iter_num += 1
    # the time-limit warning (SIGUSR1) on any rank: all save at this same step and ask the job to requeue
    if ckpt.should_stop():
        ckpt.save(iter_num, best_val_loss=best_val_loss)
        ckpt.requeue()

ckpt.save(iter_num, best_val_loss=best_val_loss)  # the final weights, where a longer run would go on from
if master_process:
    losses = estimate_loss()
    best_val_loss = min(best_val_loss, losses["val"])
    metrics.writerow({"step": iter_num, "train/loss": losses["train"], "val/loss": losses["val"], "lr": get_lr(iter_num)})
    metrics_file.close()
    results = {"iters": iter_num, "train_loss": losses["train"], "val_loss": losses["val"],
               "best_val_loss": best_val_loss}
    with open(os.path.join(out_dir, "results.json.tmp"), "w") as f:  # whole or not at all: a reader never sees half
        json.dump(results, f, indent=2)
    os.replace(os.path.join(out_dir, "results.json.tmp"), os.path.join(out_dir, "results.json"))  # last: "finished"
    print(f"done: {json.dumps(results)}", flush=True)
if ddp:
    destroy_process_group()
