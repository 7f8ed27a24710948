"""Plain PyTorch DDP, no Lightning and no cluster-train import: what a launcher owes it is the environment that
`torch.distributed.init_process_group("env://")` reads (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and LOCAL_RANK
for the GPU. cluster-train sets them under every launch shape, as torchrun does. Rank 0 writes the results contract
(docs/how-to/own-code.md#results-and-curves) into $CT_RUN_DIR: metrics.csv, a row every --log-every steps, and
results.json, the final numbers, last (the job reads it as "training finished"): report, compare and runs show them.

    python train.py --steps 200            # under run-cluster: see experiment.yaml
"""
import argparse
import csv
import json
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def regression_data(n=4096, features=32):
    """A fixed problem: every rank builds the same tensors from the same seed and trains on its own shard."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, features, generator=g)
    y = torch.tanh(x @ torch.randn(features, 1, generator=g)) + 0.05 * torch.randn(n, 1, generator=g)
    return x, y


def metrics_csv(out: Path):
    """metrics.csv's writer, appending (its header once, where the file is new), each row flushed as written."""
    new = not (out / "metrics.csv").is_file()
    file = (out / "metrics.csv").open("a", newline="", buffering=1)
    writer = csv.DictWriter(file, ["step", "train_loss"])
    if new:
        writer.writeheader()
    return writer


def say(line: str) -> None:
    """One write per line: the ranks share the job's log, and unbuffered output would interleave text and newline."""
    print(line + "\n", end="", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=10, help="steps between metrics.csv rows")
    p.add_argument("--out", default=os.environ.get("CT_RUN_DIR", "."),
                   help="where rank 0 writes metrics.csv and results.json")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    say(f"rank {rank}/{world} local_rank {local_rank}/{os.environ.get('LOCAL_WORLD_SIZE')} "
          f"node_rank {os.environ.get('NODE_RANK')} host {socket.gethostname()}")

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    x, y = regression_data()
    x_shard, y_shard = x[rank::world].to(device), y[rank::world].to(device)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                                                        torch.nn.Linear(64, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    with torch.no_grad():
        initial = loss_fn(model(x.to(device)), y.to(device)).item()
    log = metrics_csv(Path(args.out)) if rank == 0 else None
    for step in range(args.steps):
        start = (step * args.batch) % len(x_shard)
        xb, yb = x_shard[start:start + args.batch], y_shard[start:start + args.batch]
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()  # DDP averages the gradients over the ranks
        opt.step()
        if log and (step + 1) % args.log_every == 0:
            log.writerow({"step": step + 1, "train_loss": loss.item()})  # rank 0's batch
    with torch.no_grad():
        final = loss_fn(model(x.to(device)), y.to(device)).item()
    say(f"rank {rank}/{world} done: loss {initial:.4f} -> {final:.4f}")
    if rank == 0:
        results = {"world_size": world, "steps": args.steps, "initial_loss": initial, "final_loss": final}
        tmp = Path(args.out, "results.json.tmp")  # whole or not at all: a reader never sees half of it
        tmp.write_text(json.dumps(results, indent=2) + "\n")
        os.replace(tmp, Path(args.out, "results.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
