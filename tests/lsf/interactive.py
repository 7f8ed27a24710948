"""Interactive jobs of the LSF stand-in (see standin.py), as IBM's LSF 10.1 documents `bsub -I` and `bsub -Is`:
bsub itself waits for the dispatch ("<<Waiting for dispatch ...>>", "<<Starting on HOST>>" on standard error), runs
the command on the job's first host with bsub's standard input and output attached (-Is: through a pseudo-terminal,
LSF's shell mode), and exits with the command's exit status once the job is done; the job is a record like any other
(bjobs shows it RUN, then DONE or EXIT; bkill ends it as a batch job: SIGINT, SIGTERM, later SIGKILL)."""
import json
import os
import pty
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from records import event, job_dir, write
from supervisor import POLL_S, finish, on_host, signal_job


def attached(job_id: str, command: list, pseudo_terminal: bool) -> int:
    """Dispatch the job now and run its command attached; its exit status."""
    job = job_dir(job_id)
    rec = json.loads((job / "job.json").read_text())
    host = rec["slots"][0]
    print("<<Waiting for dispatch ...>>", file=sys.stderr, flush=True)
    pid_file = job / "pid"
    # the command's first process writes its pid (its own process group) before it becomes the command
    argv = [*shlex.split(on_host(host)), "bash", "-c", f'echo $$ > {shlex.quote(str(pid_file))}; exec "$@"', "bash",
            *command]
    write(job, "stat", "RUN")
    event(job, "start", hosts=[host], restart=False, interactive=True)
    print(f"<<Starting on {host}>>", file=sys.stderr, flush=True)
    ended = threading.Event()
    threading.Thread(target=kill_on_request, args=(job, pid_file, ended, rec["terminate_interval_s"]),
                     daemon=True).start()
    env = json.loads((job / "env.json").read_text())
    cwd = rec["cwd"] if Path(rec["cwd"]).is_dir() else None
    code = with_pty(argv, env, cwd, job) if pseudo_terminal else plain(argv, env, cwd, job)
    ended.set()
    code = code if code >= 0 else 128 - code
    killed = (job / "kill_request").exists()
    stat = "DONE" if code == 0 and not killed else "EXIT"
    event(job, "end", code=code, stat=stat, reason="TERM_OWNER" if killed else None, requeue=None)
    finish(job, stat, code, "TERM_OWNER" if killed else None)
    print("<<Job is finished>>" if stat == "DONE" else f"<<Job exited with exit code {code}>>", file=sys.stderr)
    return code


def plain(argv: list, env: dict, cwd, job: Path) -> int:
    """The command with bsub's standard input and output, in its own process group; Ctrl-C at bsub (SIGINT) ends
    the job as bkill does, as LSF documents for interactive jobs."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            (job / "kill_request").touch()


def with_pty(argv: list, env: dict, cwd, job: Path) -> int:
    """The command in a new session on a pseudo-terminal, bsub's terminal copied to and from it (pty.spawn); a
    SIGINT to bsub itself ends the job as bkill does."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    here = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        try:
            status = pty.spawn(argv)
        except KeyboardInterrupt:
            (job / "kill_request").touch()
            _, status = os.waitpid(-1, 0)  # pty.spawn's child, ended by kill_on_request
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    return os.waitstatus_to_exitcode(status)


def kill_on_request(job: Path, pid_file: Path, ended: threading.Event, interval_s: float) -> None:
    """bkill of the running interactive job: its process group gets SIGINT and SIGTERM, SIGKILL `interval_s` later."""
    while not ended.is_set() and not (job / "kill_request").exists():
        time.sleep(POLL_S)
    if ended.is_set():
        return
    pgid = int(pid_file.read_text()) if pid_file.is_file() else 0
    for signum in (signal.SIGINT, signal.SIGTERM):
        if pgid:
            signal_job(job, pgid, signum, "bkill")
    if not ended.wait(interval_s) and pgid:
        signal_job(job, pgid, signal.SIGKILL, "bkill")
