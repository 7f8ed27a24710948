"""`python -m train command --config runs/<id>/config.yaml`: your own training command, run inside the image from the
code snapshot the run directory holds (runs/<id>/code), with the variables plain PyTorch and Lightning read
(cluster_train/image/launch_env.py) and the run's own (CT_RUN_DIR, CT_CHECKPOINT_DIR, CT_RESUMED, CT_REQUEUE_EXIT);
`standalone: true` (run-cluster --standalone, one rank) runs it without the launcher's variables.

Under srun and blaunch each task becomes the command (exec), so the scheduler's signals reach it directly. Where the
scheduler starts one process per node (local, LSF on one host) this process starts one rank per GPU, as torchrun
would, forwards the job's signals to them, and ends them all when one fails. Imports no torch.
"""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

from cluster_train.shared import config as cfg
from cluster_train.image import command_trackers, launch_env
from cluster_train.shared.errors import UserError
from cluster_train.shared.exit_codes import REQUEUE

CODE_DIR = "code"  # cluster_train/host/jobs/code_snapshot.py unpacks the snapshot here
FORWARDED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
KILL_AFTER_S = 15  # after one rank failed, the others get SIGTERM, then SIGKILL (one blocked in a collective)


def run_command(config: str) -> int:
    run = cfg.load(config)
    run_dir = Path(config).resolve().parent
    if not run.command:
        raise UserError(f"{config} names no command; `python -m train fit` runs a task")
    env = {**os.environ, **launch_env.run_env(os.environ, str(run_dir)), **launch_env.python_hook_env(os.environ)}
    Path(env["CT_CHECKPOINT_DIR"]).mkdir(exist_ok=True)
    os.chdir(run_dir / CODE_DIR)
    if run.standalone:
        return run_standalone(run, run_dir, env)
    if launch_env.starts_ranks_itself(os.environ):
        return start_ranks(run.command, env, lambda rank_env: command_trackers.for_rank(run, run_dir, with_lightning(
            rank_env)))
    env = command_trackers.for_rank(run, run_dir, with_lightning({**env, **launch_env.task_env(os.environ)}))
    announce(env, run.command)
    return exec_command(run.command, env)


def run_standalone(run: cfg.RunConfig, run_dir: Path, env: Dict[str, str]) -> int:
    """One rank, run as `python train.py` runs: no launcher variables (torchrun's --standalone), rank 0's trackers."""
    env = command_trackers.for_rank(run, run_dir, {**launch_env.standalone_env(env), "RANK": "0"})
    env.pop("RANK")
    say(f"[cluster-train] standalone, on host {socket.gethostname()}: {' '.join(run.command)}")
    if launch_env.starts_ranks_itself(os.environ):  # local, LSF on one host: this process forwards the signals
        return start_ranks(run.command, env, dict, ranks=1)
    return exec_command(run.command, env)


def with_lightning(env: Dict[str, str]) -> Dict[str, str]:
    """A rank's environment with the defaults an unmodified Lightning Trainer reads (launch_env.lightning_env)."""
    return {**env, **launch_env.lightning_env(env)}


def exec_command(command: List[str], env: Dict[str, str]):
    try:
        os.execvpe(command[0], command, env)
    except OSError as err:
        raise UserError(f"command {command[0]!r} cannot run in the image ({err.strerror}); fix command:") from None


def announce(env: Dict[str, str], command: List[str]) -> None:
    say(f"[cluster-train] rank {env['RANK']}/{env['WORLD_SIZE']} on host {socket.gethostname()} (node "
        f"{env['NODE_RANK']}, local rank {env['LOCAL_RANK']}): {' '.join(command)}")


def say(line: str) -> None:
    """One write per line: the ranks share the job's log, and unbuffered output would split text and newline."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def start_ranks(command: List[str], env: Dict[str, str], for_rank: Callable[[Dict[str, str]], Dict[str, str]],
                ranks: int = 0) -> int:
    """One process per rank on this host (`for_rank`: what each rank's environment gains or loses); the worst exit
    status (75 when they saved to be requeued). `ranks`: one standalone process, its environment as given."""
    _, per_node = launch_env.shape(env)
    port = launch_env.free_port()
    procs = []
    for local in range(ranks or per_node):
        rank_env = for_rank(env if ranks else {**env, **launch_env.local_rank_env(env, local, port)})
        if not ranks:
            announce(rank_env, command)
        try:
            procs.append(subprocess.Popen(command, env=rank_env))
        except OSError as err:
            end(procs)
            raise UserError(f"command {command[0]!r} cannot run in the image ({err.strerror}); fix command:") from None
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, frame: [p.send_signal(signum) for p in procs if p.poll() is None])
    return wait_all(procs)


def wait_all(procs: List[subprocess.Popen]) -> int:
    failed, failed_at = 0, 0.0  # the first failing rank's status: the others' are our SIGTERM's
    while [p.poll() for p in procs].count(None):  # poll every one: each sets its returncode
        codes = [p.returncode for p in procs if p.returncode not in (None, 0, REQUEUE)]
        if codes and not failed:
            failed, failed_at = shell_status(codes[0]), time.monotonic()
            say(f"[cluster-train] error: a rank exited with status {failed}; ending the other ranks")
            end(procs, signal.SIGTERM)
        if failed and time.monotonic() - failed_at > KILL_AFTER_S:
            end(procs, signal.SIGKILL)
        time.sleep(0.2)
    codes = [p.returncode for p in procs]
    failures = [shell_status(c) for c in codes if c not in (0, REQUEUE)]
    if failed or failures:
        return failed or failures[0]
    return REQUEUE if REQUEUE in codes else 0


def shell_status(code: int) -> int:
    """A status as the shell reports it: 128 + N for a process ended by signal N."""
    return code if code >= 0 else 128 - code


def end(procs: List[subprocess.Popen], sig: int = signal.SIGTERM) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
