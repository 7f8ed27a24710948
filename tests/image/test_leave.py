"""cluster_train/image/leave.py: a rank's clean ending, shared by `fit` and the function runner (`call`). Two real gloo
processes: a rank that succeeds waits for its peer at the barrier and exits 0 with its exit handlers run; a rank
leaving with another status (75: saved for a requeue) leaves at once."""
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from cluster_train.image.localrun import free_port

pytestmark = pytest.mark.slow  # two real gloo ranks with torch (8 s): make test, not make test-fast

RANK = """
import atexit, os, sys, time
import torch.distributed as dist
from cluster_train.image.leave import leave
dist.init_process_group("gloo")
atexit.register(lambda: print("exit handlers ran", flush=True))
time.sleep(float(sys.argv[1]))
print(f"leaving {time.time()}", flush=True)
leave(int(sys.argv[2]))
"""


def ranks(*plan):
    """One process per (sleep before leaving, status), in one gloo group; (exit code, output) of each."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(sleep), str(code)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                                       WORLD_SIZE=str(len(plan)), USE_LIBUV="0"))
             for rank, (sleep, code) in enumerate(plan)]
    ended = {}
    deadline = time.time() + 120
    while len(ended) < len(procs) and time.time() < deadline:
        ended.update({i: time.time() for i, p in enumerate(procs) if i not in ended and p.poll() is not None})
        time.sleep(0.05)
    return [(p.wait(1), p.stdout.read(), ended[i]) for i, p in enumerate(procs)]


def test_a_rank_that_succeeded_waits_for_its_peer_then_exits_zero():
    (code0, out0, ended0), (code1, out1, _) = ranks((0, 0), (2, 0))
    assert (code0, code1) == (0, 0), out0 + out1
    assert "exit handlers ran" in out0 and "terminate called" not in out0 + out1
    rank1_left = float(out1.split("leaving ")[1].split()[0])
    assert ended0 >= rank1_left  # rank 0 reached leave 2 s earlier and waited at the barrier for rank 1


def test_a_rank_saved_for_a_requeue_leaves_with_its_status_without_waiting():
    started = time.time()
    proc = ranks((0, 75), (0, 75))
    assert [code for code, _, _ in proc] == [75, 75], proc
    assert time.time() - started < 60
