"""`python -m cluster_train.image.notebook`: JupyterLab as the one command of a `bin/run-cluster notebook` job, inside
the image, in the run's code directory (the job's cwd).

The host wrote the token to $CT_RUN_DIR/notebook/token (0600) before submitting: it reaches Jupyter through its
environment (JUPYTER_TOKEN), never a command line, which `ps` on the node shows to every user. Once the server
answers on a free port, $CT_RUN_DIR/notebook/server.json tells the host where to forward to: the node's name, an
IPv4 address other hosts reach it at, the port, this launcher's pid (the process that takes the job's signals) and
the start time. SIGUSR1 (the scheduler's warning before the time limit) leaves a notice in the job's log and
$CT_RUN_DIR/notebook/warning; SIGTERM or SIGINT stop JupyterLab, its kernels with it, and end this process with 0.

JupyterLab runs in a session of its own: a terminal's Ctrl-C or the scheduler's signals reach only this launcher,
which stops the server once (Jupyter would otherwise ask on a terminal whether to shut down, and print its status on
SIGUSR1); it dies with the launcher. Imports no torch and no Jupyter.
"""
import ctypes
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

from cluster_train.image.launch_env import PER_TASK

NOTICE = "[cluster-train] notebook: the allocation ends soon: save your notebooks"
READY_TIMEOUT_S = 300  # a first start on a cold shared file system imports a few hundred modules
STOP_GRACE_S = 10  # well within Slurm's KillWait (30 s by default) after its SIGTERM
POLL_S = 0.2
PR_SET_PDEATHSIG = 1  # prctl(2)
CANNOT_START = 2  # no JupyterLab in the image, no token: nothing a retry would change


class _Signals:
    """What the job's signals asked for, set by the handlers and read by the waiting loops."""

    def __init__(self, notebook_dir: Path):
        self.stop = False
        self.warned = False
        self.notebook_dir = notebook_dir

    def install(self) -> None:
        signal.signal(signal.SIGUSR1, self._warn)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)

    def _warn(self, signum, frame) -> None:
        if self.warned:  # a second USR1 (the batch shell forwards the one scancel --batch sent every process) says
            return  # nothing new, and may come while the first handler is writing
        self.warned = True
        say(NOTICE)
        write_atomically(self.notebook_dir / "warning", f"{int(time.time())}\n")

    def _stop(self, signum, frame) -> None:
        self.stop = True


def main() -> int:
    notebook_dir = Path(os.environ["CT_RUN_DIR"]) / "notebook"
    signals = _Signals(notebook_dir)
    signals.install()
    if not first_task(os.environ):
        return idle_until_stopped(signals)
    if importlib.util.find_spec("jupyterlab") is None:
        sys.stderr.write(f"JupyterLab is not in this image ({sys.executable} cannot import jupyterlab): use a cpu or "
                         "cuda12.8 image built with it (make lock; make image FLAVOR=...)\n")
        return CANNOT_START
    token_file = notebook_dir / "token"
    try:
        token = token_file.read_text().strip()
    except OSError as err:
        sys.stderr.write(f"no notebook token at {token_file} ({err.strerror}): "
                         "start the server with bin/run-cluster notebook\n")
        return CANNOT_START
    port = free_port()
    server = subprocess.Popen(jupyter_command(port, Path.cwd()), env=jupyter_env(token, notebook_dir),
                              start_new_session=True, preexec_fn=die_with_parent)
    try:
        return serve(server, port, token, signals)
    finally:
        stop(server)


def first_task(environ) -> bool:
    """One server per job: where the launch starts a task per rank (srun, blaunch: a profile with several GPUs or
    nodes), only global rank 0 serves; the job's other tasks hold their place until the job ends."""
    names = PER_TASK.get(environ.get("CT_LAUNCH", ""))
    return not names or environ.get(names[0], "0") == "0"


def idle_until_stopped(signals: _Signals) -> int:
    while not signals.stop:
        time.sleep(POLL_S * 5)
    return 0


def serve(server: subprocess.Popen, port: int, token: str, signals: _Signals) -> int:
    """Announce the server once it answers, then keep it until a signal asks to stop (0) or it ends by itself."""
    if not wait_until_ready(server, port, token, signals):
        if signals.stop:
            return 0
        if server.poll() is None:
            sys.stderr.write(f"JupyterLab did not answer on port {port} within {READY_TIMEOUT_S} s\n")
            return 1
        return _ended_early(server)
    write_atomically(signals.notebook_dir / "server.json", json.dumps(server_info(port)) + "\n")
    while not signals.stop:
        if server.poll() is not None:
            return _ended_early(server)
        time.sleep(POLL_S)
    return 0


def die_with_parent() -> None:
    """In the child before it runs Jupyter: the kernel sends it SIGTERM when this launcher dies, even by SIGKILL. In
    a session of its own, a scheduler that signals only the job's process groups (LSF without cgroups) would
    otherwise leave the server running on the node after the job."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def jupyter_command(port: int, root: Path) -> List[str]:
    """--allow-root: Jupyter refuses uid 0 (a container built or run with fakeroot) even behind a token. Compute
    nodes seldom reach the internet: no PyPI extension manager, news feed or update check for the page to wait on."""
    return [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=0.0.0.0", f"--port={port}",
            "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}", "--ServerApp.allow_remote_access=True",
            "--LabApp.extension_manager=readonly", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate"]


def jupyter_env(token: str, notebook_dir: Path) -> Dict[str, str]:
    """The server's environment, which its kernels inherit: the run's code first on the path; Jupyter's and IPython's
    own files under the run's notebook directory, since a job's container has no home (--no-home) and the image is
    read-only (the lab's workspace and settings stay with the run)."""
    env = dict(os.environ, JUPYTER_TOKEN=token)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    for name, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                      ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        env.setdefault(name, str(notebook_dir / "jupyter" / sub))
    return env


def wait_until_ready(server: subprocess.Popen, port: int, token: str, signals: _Signals) -> bool:
    """True once /api/status answers with the token; False when the server ended, did not answer in time or a
    signal asked to stop."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"token {token}"})
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not signals.stop and server.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            time.sleep(POLL_S)
    return False


def _ended_early(server: subprocess.Popen) -> int:
    code = server.wait()  # Jupyter's own lines are already in the job's log
    sys.stderr.write(f"JupyterLab ended by itself (exit status {code}); its own lines above say why\n")
    return code or 1


def stop(server: subprocess.Popen) -> None:
    """SIGTERM: Jupyter shuts its kernels down and exits; SIGKILL if it has not within STOP_GRACE_S."""
    if server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def server_info(port: int) -> Dict[str, object]:
    return {"host": socket.gethostname(), "address": node_address(), "port": port, "pid": os.getpid(),
            "started": int(time.time())}


def node_address() -> str:
    """An IPv4 address of this node that other hosts reach: its name's, unless that is a loopback (127.0.1.1 in
    Debian's /etc/hosts); else the one this node would send from towards the submitting host, or its default route."""
    candidates = _addresses_of(socket.gethostname())
    for peer in (os.environ.get("SLURM_SUBMIT_HOST"), os.environ.get("LSB_SUB_HOST"), "192.0.2.1"):
        candidates += [_source_towards(address) for address in _addresses_of(peer)]
    return next((a for a in candidates if a and not a.startswith("127.")), "127.0.0.1")


def _addresses_of(name: Optional[str]) -> List[str]:
    if not name:
        return []
    try:
        return [info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)]
    except OSError:
        return []


def _source_towards(address: str) -> Optional[str]:
    """The local address of the route to `address` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, 9))
            return probe.getsockname()[0]
        except OSError:
            return None


def free_port() -> int:
    """A port free on every interface now; Jupyter takes it with port_retries 0 (it never moves to another)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def write_atomically(path: Path, text: str) -> None:
    """Readers (the host polling server.json) see the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # one per write, not per pid
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from a host reading as another uid
    os.replace(tmp, path)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
