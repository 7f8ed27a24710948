"""Run a function on N local CPU processes the way a cluster launcher does (env vars), and collect each rank's result.

Written by hand because Lightning's own CPU launchers either re-run sys.argv (pytest, a bench script) or only
support `spawn` for plain DDP; setting LOCAL_RANK/WORLD_SIZE makes every strategy treat the ranks as launched
externally, exactly as under srun or torchrun.
"""
import os
import pickle
import socket
import tempfile
from pathlib import Path

from cluster_train.image.leave import leave


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, nprocs: int, port: int, outdir: str, fn, args) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(nprocs), RANK=str(rank),
        LOCAL_RANK=str(rank), NODE_RANK="0", USE_LIBUV="0",
    )
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    result = fn(rank, *args)
    Path(outdir, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))
    # as a job's rank ends (leave.py): the peers met at a barrier, then out without gloo's teardown, which aborts at a
    # plain exit and whose destroy_process_group hung here once a peer had gone (in make test, under load)
    leave(0)


def spawn(fn, nprocs: int, *args) -> list:
    """fn(rank, *args) on `nprocs` fresh processes (also for nprocs=1, so global state never leaks); results by rank."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as outdir:
        mp.spawn(_worker, args=(nprocs, free_port(), outdir, fn, args), nprocs=nprocs, join=True)
        return [pickle.loads(Path(outdir, f"rank{r}.pkl").read_bytes()) for r in range(nprocs)]
