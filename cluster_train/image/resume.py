"""Resume for plain PyTorch and DDP scripts: stop at the time-limit warning, save, requeue, go on where it stopped.

    from cluster_train.image.resume import Checkpointer

    ckpt = Checkpointer(model=model, optimizer=optimizer)  # anything with state_dict() and load_state_dict()
    start = ckpt.load()               # 0, or the step last.ckpt was saved at (model, optimizer, RNG states loaded)
    for step in range(start, max_steps):
        train_one_step()
        if ckpt.should_stop():        # every rank, at the same step: one rank's SIGUSR1 or SIGTERM stops them all
            ckpt.save(step + 1)       # rank 0 writes last.ckpt atomically; every rank waits for it
            ckpt.requeue()            # exit $CT_REQUEUE_EXIT (75): the job requeues, the next segment loads it

The warning only sets a flag (cluster_train/image/stop.py, which also reads the job's stop file): the ranks agree on
it with one all-reduce where the script calls should_stop(), never inside a signal handler, so every rank saves and
exits at the same step. Each rank's RNG states (python, numpy, torch, CUDA) travel in the checkpoint, so a resumed run
draws the same batches and ends bit for bit as an uninterrupted one.

Outside cluster-train the defaults stand in for its variables: ./checkpoints for CT_CHECKPOINT_DIR, 75 for
CT_REQUEUE_EXIT (EX_TEMPFAIL), and nothing is recorded without CT_RUN_DIR. Importing this module imports no torch
(the methods do), so a script's --help stays fast.
"""
import io
import json
import os
import random
import signal
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

from cluster_train.image import stop
from cluster_train.shared import exit_codes
from cluster_train.shared.durable import atomic_write_bytes

DEFAULT_DIR = "checkpoints"  # relative to the working directory, where CT_CHECKPOINT_DIR is not set
FILE = "last.ckpt"


def say(message: str) -> None:
    print(f"[cluster-train] {message}", flush=True)


def requeue_exit() -> int:
    value = os.environ.get("CT_REQUEUE_EXIT", str(exit_codes.REQUEUE))
    if not value.isdigit():
        raise ValueError(f"CT_REQUEUE_EXIT={value!r} is not an exit status; unset it or set a number such as 75")
    return int(value)


class Checkpointer:
    def __init__(self, directory=None, **objects):
        """objects: name -> what to save and load (a model, an optimizer, a scheduler, a GradScaler...)."""
        lacking = [name for name, obj in objects.items()
                   if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"))]
        if not objects or lacking:
            raise TypeError(f"Checkpointer({', '.join(lacking) or 'nothing'}): pass the model, optimizer, ... as "
                            "name=object, each with state_dict() and load_state_dict()")
        self.objects = objects
        self.path = Path(directory or os.environ.get("CT_CHECKPOINT_DIR") or DEFAULT_DIR) / FILE
        self.extra = {}  # the save's extra values (best loss, config, ...), after load()
        self.requeue_code = requeue_exit()  # a bad CT_REQUEUE_EXIT is said now, not after hours of training
        stop.install()  # SIGUSR1 and SIGTERM set the flag instead of killing the process

    def should_stop(self) -> bool:
        """Whether any rank was asked to stop: call it at the same step on every rank (a collective under DDP)."""
        asked = 1.0 if stop.poll() else 0.0
        dist = _distributed()
        if dist is None:
            return bool(asked)
        import torch

        device = _device(dist, self.objects)
        flag = torch.tensor([asked], device=device)
        with _current(device):
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def save(self, step: int, **extra) -> None:
        """last.ckpt for `step` (the step to go on from): rank 0 writes it (a temporary file, then a rename); every
        rank's RNG states are in it; every rank returns once it is in place. Call it on every rank."""
        import torch

        dist = _distributed()
        with _current(_device(dist, self.objects) if dist is not None else None):
            states = _gather(dist, _rng_states())  # all_gather_object works on the current CUDA device (NCCL)
        if _rank(dist) == 0:
            checkpoint = {"step": int(step), "world_size": len(states), "rng": states, "extra": extra,
                          "state": {name: obj.state_dict() for name, obj in self.objects.items()}}
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            atomic_write_bytes(self.path, buffer.getbuffer())
            say(f"saved {self.path} at step {step}")
        if dist is not None:
            with _current(_device(dist, self.objects)):
                dist.barrier()  # no rank exits (and no requeue starts) before the file is complete

    def load(self) -> int:
        """The step to start from: last.ckpt's after loading it into every object and this rank's RNG, else 0."""
        if not self.path.is_file():
            return 0
        import torch

        # our own file, written by save(): it holds python and numpy RNG states, which weights_only refuses
        checkpoint = torch.load(self.path, map_location="cpu", weights_only=False)
        saved, given = set(checkpoint["state"]), set(self.objects)
        if saved != given:
            raise ValueError(f"{self.path} holds {sorted(saved)} but Checkpointer was given {sorted(given)}; pass "
                             "the same names, or remove the file to start again")
        for name, obj in self.objects.items():
            obj.load_state_dict(checkpoint["state"][name])
        dist = _distributed()
        rank, world = _rank(dist), _world(dist)
        if checkpoint["world_size"] == world:
            _set_rng_states(checkpoint["rng"][rank])
        elif rank == 0:
            say(f"{self.path} was saved by {checkpoint['world_size']} rank(s), this run has {world}: the RNG states "
                "are not restored, so the run goes on but not bit for bit")
        self.extra, step = checkpoint["extra"], checkpoint["step"]
        if rank == 0:
            say(f"resuming from {self.path} at step {step}")
            record_resumed(step)
        return step

    def requeue(self) -> None:
        """Exit with the requeue status: the batch shell requeues the job, whose next segment load()s last.ckpt."""
        sys.stdout.flush()
        sys.stderr.flush()
        # srun ends the other ranks (SIGTERM) as soon as one exits non-zero, and Python's exit puts the default,
        # deadly, handlers back before the process is gone: a rank still exiting would die of it (143, "saved no
        # checkpoint"). An ignored signal stays ignored through the exit.
        if threading.current_thread() is threading.main_thread():  # where Python lets a handler be set
            for sig in stop.SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(self.requeue_code)


def record_resumed(step: int) -> None:
    """The run's record of this segment (logs/segments.jsonl, as the registered tasks write it): status shows the
    step it resumed from."""
    run_dir = os.environ.get("CT_RUN_DIR")
    if not run_dir:
        return
    segment = os.environ.get("CT_SEGMENT", "")
    line = {"event": "train_start", "segment": int(segment) if segment.isdigit() else None, "resumed_epoch": None,
            "resumed_step": step, "lost_steps": None, "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    logs = Path(run_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "segments.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def _distributed():
    """torch.distributed when a process group of more than one rank is up, else None (one process: no collective)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _rank(dist) -> int:
    return dist.get_rank() if dist is not None else 0


def _world(dist) -> int:
    return dist.get_world_size() if dist is not None else 1


def _device(dist, objects=None):
    """NCCL reduces CUDA tensors only, on this rank's own GPU: the one its model is on (a script that puts its model
    on cuda:LOCAL_RANK without torch.cuda.set_device would otherwise have every rank of a node on cuda:0, where NCCL
    fails or hangs), else the current device; gloo reduces CPU ones."""
    import torch

    if dist.get_backend() != "nccl":
        return torch.device("cpu")
    for obj in (objects or {}).values():
        params = getattr(obj, "parameters", None)  # a module's; an optimizer or a scaler has none
        for param in params() if callable(params) else ():
            if getattr(param, "device", None) is not None and param.device.type == "cuda":
                return param.device
    return torch.device("cuda", torch.cuda.current_device())


def _current(device):
    """A context in which `device` is the current CUDA device (a CPU one, or None: nothing changes)."""
    import contextlib

    if device is None or device.type != "cuda":
        return contextlib.nullcontext()
    import torch

    return torch.cuda.device(device)


def _gather(dist, state) -> list:
    """Every rank's `state`, in rank order, on every rank (the ranks draw from their own seeds)."""
    if dist is None:
        return [state]
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def _rng_states() -> dict:
    """Python's, torch's (CUDA's where it is used) and numpy's (where the script imported it) RNG states, as plain
    types: Lightning loads checkpoints with weights_only=True, which refuses numpy arrays (resume_lightning.py uses
    these too)."""
    import torch

    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    if "numpy" in sys.modules:  # only a script that imported numpy draws from it
        name, keys, *rest = sys.modules["numpy"].random.get_state()
        states["numpy"] = (name, keys.tolist(), *rest)
    return states


def _set_rng_states(states: dict) -> None:
    import torch

    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        import numpy as np

        name, keys, *rest = states["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
