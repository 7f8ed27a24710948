"""`python -m cluster_train.image.node_check`: what `run-cluster doctor --node PROFILE` runs on a profile's nodes, one
process per rank, as your own command runs (RANK, WORLD_SIZE, MASTER_ADDR... from cluster_train/image/launch_env.py):
each rank's host, the GPUs it sees, the NVIDIA driver against the image's minimum, the fabric devices its node exposes
(InfiniBand verbs, Slingshot cxi), and one all-reduce across every rank (NCCL on GPUs, gloo on CPUs) with its bus
bandwidth as nccl-tests defines it (algorithm bandwidth x 2(n-1)/n). Rank 0 writes node_check.json in the run directory
and prints the table."""
import glob
import json
import os
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

MB = {"nccl": 256, "gloo": 16}  # the all-reduce's size: large enough that bandwidth, not latency, sets its time
ROUNDS, WARMUP = 5, 2
FABRIC_DEVICES = ("/dev/infiniband/uverbs*", "/dev/cxi*")


def facts() -> dict:
    rank, gpus = int(os.environ["RANK"]), torch.cuda.device_count()
    return {"rank": rank, "host": socket.gethostname(), "gpus_visible": gpus,
            "driver": os.environ.get("CT_DRIVER_VERSION", ""), "needs_driver": os.environ.get("CT_NEED_DRIVER", ""),
            "fabric_devices": sorted(d for pattern in FABRIC_DEVICES for d in glob.glob(pattern))}


def bus_bandwidth(backend: str, world: int, device: torch.device) -> dict:
    tensor = torch.ones(MB[backend] * 2**20 // 4, dtype=torch.float32, device=device)
    for _ in range(WARMUP):
        dist.all_reduce(tensor)
    sync(device)
    started = time.perf_counter()
    for _ in range(ROUNDS):
        dist.all_reduce(tensor)
    sync(device)
    seconds = (time.perf_counter() - started) / ROUNDS
    algorithm = tensor.numel() * 4 / seconds / 1e9
    return {"backend": backend, "bytes": tensor.numel() * 4, "seconds": round(seconds, 4),
            "bus_gb_per_s": round(algorithm * 2 * (world - 1) / world, 3) if world > 1 else None}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def table(ranks: list, reduce: dict) -> str:
    rows = [f"{'rank':>4}  {'host':12}  {'GPUs':>4}  {'driver (needs)':22}  fabric devices"]
    for r in ranks:
        driver = f"{r['driver'] or '-'} ({r['needs_driver'] or 'none'})"
        rows.append(f"{r['rank']:>4}  {r['host']:12}  {r['gpus_visible']:>4}  {driver:22}  "
                    f"{', '.join(r['fabric_devices']) or 'none'}")
    bandwidth = f"{reduce['bus_gb_per_s']} GB/s bus bandwidth" if reduce["bus_gb_per_s"] else "one rank: no transfer"
    rows.append(f"all-reduce of {reduce['bytes'] // 2**20} MiB over {len(ranks)} rank(s) ({reduce['backend']}): "
                f"{reduce['seconds'] * 1000:.1f} ms, {bandwidth}")
    return "\n".join(rows)


def main() -> None:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cuda", local % torch.cuda.device_count()) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, facts())
    reduce = bus_bandwidth(backend, dist.get_world_size(), device)
    if dist.get_rank() == 0:
        record = {"ranks": ranks, "all_reduce": reduce}
        (Path(os.environ.get("CT_RUN_DIR", ".")) / "node_check.json").write_text(json.dumps(record, indent=2) + "\n")
        print(table(ranks, reduce), flush=True)
    dist.barrier()  # every rank has what it needs; then each leaves without tearing the group down:
    sys.stdout.flush()  # gloo's teardown races a peer's exit (seen: a hang in destroy_process_group, an abort
    os._exit(0)  # in its threads at interpreter exit), and nothing here needs it


if __name__ == "__main__":
    main()
