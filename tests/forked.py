"""bin/run-cluster in a child forked from the test process, which has its code imported already: a process of its own,
as bin/run-cluster is, without paying Python's start and the host side's imports (0.3-0.5 s of CPU each, minutes over
the suite on 2 cores). Fork only from the test's own thread: forking beside another thread can copy a held lock."""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

RUN_CLUSTER = Path(__file__).resolve().parents[1] / "bin" / "run-cluster"


def start(argv: Sequence, out: int, err: int, env: Optional[Dict[str, str]] = None, cwd=None,
          then: Optional[Callable[[List[str]], None]] = None) -> int:
    """Forks a child that runs `bin/run-cluster ARGV` with stdout and stderr on the given fds; returns its pid.
    `then(argv)` runs in the child after it, in the same directory and environment (the same request made another
    way: tests/host/test_bad_inputs.py's API side)."""
    import cluster_train.host.cli  # noqa: F401  imported once here, inherited by every child
    import cluster_train.host.submit  # noqa: F401  a new run's modules, which the CLI itself imports only for one

    pid = os.fork()
    if pid:
        return pid
    rc = 1
    try:  # the child: bin/run-cluster's main() with this directory, environment and argv, then _exit
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        tempfile.tempdir = None  # as a new process finds it: from TMPDIR, not what a test set in this one
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # pytest's capture objects are not fd 1 and 2
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        argv = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv]  # as sys.argv shows bytes
        sys.argv = [str(RUN_CLUSTER), *argv]
        from cluster_train.host.cli import main as run_cluster_main

        rc = run_cluster_main(argv)
        if then is not None:
            then(argv)
    except SystemExit as exit:
        rc = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        if not isinstance(exit.code, (int, type(None))):
            print(exit.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc if isinstance(rc, int) else 1)


def wait(pid: int, timeout_s: float) -> Optional[int]:
    """The child's exit code as subprocess gives it (-N for signal N); None if it outlived timeout_s (then killed)."""
    deadline, pause = time.monotonic() + timeout_s, 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def run_cluster(*args, env: Optional[Dict[str, str]] = None, cwd=None, timeout: float = 900):
    """What subprocess.run([python, bin/run-cluster, *args], capture_output=True, text=True, ...) returns."""
    argv = [str(a) for a in args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        rc = wait(start(argv, out.fileno(), err.fileno(), env, cwd), timeout)
        if rc is None:
            raise subprocess.TimeoutExpired([str(RUN_CLUSTER), *argv], timeout)
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode("utf-8", "backslashreplace") for f in (out, err))
    return subprocess.CompletedProcess([str(RUN_CLUSTER), *argv], rc, stdout, stderr)
