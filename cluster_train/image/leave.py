"""How a rank's process ends: flushed, its peers met at a barrier when it succeeded, then a hard exit.

A plain interpreter exit with a gloo process group still up can abort ("terminate called without an active
exception": gloo's threads racing a peer's exit), and srun then kills the step: a run that finished is recorded FAILED
(exit 143). destroy_process_group was seen to hang instead (cluster_train/image/node_check.py), so nothing is torn down:
the exit handlers run (loggers, trackers), then os._exit skips the C++ teardown. Imports no torch.
"""
import atexit
import os
import sys
from typing import NoReturn


def leave(code: int) -> NoReturn:
    """End this process with `code`; on success (0) wait first for every rank of the process group, if one is up,
    so that no rank leaves while a peer still talks to it."""
    if code == 0:
        _meet_peers()
    atexit._run_exitfuncs()  # what a normal exit would run (logging, trackers' own handlers)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _meet_peers() -> None:
    dist = sys.modules.get("torch.distributed")  # never imported here: a process without torch has no group
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()

