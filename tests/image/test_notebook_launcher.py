"""cluster_train/image/notebook.py (contract C1): JupyterLab started in the real CPU image as a notebook job's command
runs (apptainer exec --cleanenv --no-home, the run's code directory as cwd, CT_RUN_DIR set, the token in a 0600
file): it answers with the token only, on the address and port its server.json gives; the job's warning signal
leaves a notice and the warning file; SIGTERM stops it with status 0 and frees the port. Without JupyterLab the
launcher says so in one line and exits 2."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT
from cluster_train.host.images import packages
from cluster_train.image import notebook

TOKEN = "t0ken-of-the-test"


def get(url: str, token: str = "") -> dict:
    headers = {"Authorization": f"token {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
        return json.load(answer)


def wait_for_file(path: Path, proc: subprocess.Popen, timeout_s: float = 90) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {path.name} after {timeout_s} s: {proc.communicate()[0][-3000:]}")
        time.sleep(0.1)
    return path.read_text()


def open_port(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "notebook").mkdir()
    token = tmp_path / "notebook" / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return tmp_path


@pytest.mark.image
def test_the_launcher_serves_with_the_token_warns_and_stops_cleanly(cpu_image, run_dir):
    assert packages.jupyterlab_missing(cpu_image) is None  # contract C2 on the real image: labelled as it holds it
    proc = subprocess.Popen(
        ["apptainer", "exec", "--cleanenv", "--no-home", "-B", str(run_dir), "--pwd", str(run_dir / "code"),
         "--env", f"CT_RUN_DIR={run_dir}", cpu_image.path, "python", "-m", "cluster_train.image.notebook"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        server = json.loads(wait_for_file(run_dir / "notebook" / "server.json", proc))
        url = f"http://127.0.0.1:{server['port']}"
        assert "started" in get(f"{url}/api/status", TOKEN)
        assert "python3" in get(f"{url}/api/kernelspecs", TOKEN)["kernelspecs"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(f"{url}/api/kernelspecs")
        assert refused.value.code in (401, 403)
        assert server["host"] == socket.gethostname() and not server["address"].startswith("127.")
        assert open_port(server["address"], server["port"])  # listening beyond loopback, where others reach it
        assert abs(server["started"] - time.time()) < 120

        proc.send_signal(signal.SIGUSR1)
        warned = int(wait_for_file(run_dir / "notebook" / "warning", proc, timeout_s=10))
        assert abs(warned - time.time()) < 30
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, output
    assert output.splitlines().count(notebook.NOTICE) == 1, output
    assert TOKEN not in output  # Jupyter's own log masks it
    assert not open_port("127.0.0.1", server["port"])


def test_without_jupyterlab_one_line_and_status_2(run_dir):
    """The cuda11.6 image has no JupyterLab: the import is made to fail here, whatever this venv holds."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['jupyterlab'] = None; "
                               "from cluster_train.image.notebook import main; sys.exit(main())"],
        cwd=ROOT, env=dict(os.environ, CT_RUN_DIR=str(run_dir)), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.startswith("JupyterLab is not in this image (") and done.stderr.count("\n") == 1, done.stderr


def test_a_profile_with_several_tasks_serves_once_from_rank_0(run_dir):
    """A notebook on a 4-GPU srun profile starts four tasks: only global rank 0 serves, the others wait for the job's
    end (SIGTERM) and leave no server of their own."""
    assert notebook.first_task({"CT_LAUNCH": "srun", "SLURM_PROCID": "0"})
    assert not notebook.first_task({"CT_LAUNCH": "blaunch", "CT_GLOBAL_RANK": "2"})
    assert notebook.first_task({"CT_LAUNCH": "lightning"}) and notebook.first_task({})
    waiting = subprocess.Popen([sys.executable, "-m", "cluster_train.image.notebook"], cwd=ROOT,
                               env=dict(os.environ, CT_RUN_DIR=str(run_dir), CT_LAUNCH="srun", SLURM_PROCID="1"))
    time.sleep(2)
    assert waiting.poll() is None and not (run_dir / "notebook" / "server.json").exists()
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(10) == 0


def test_a_second_warning_signal_while_the_first_is_being_written_ends_nothing(run_dir, monkeypatch, capsys):
    """scancel --batch --signal=USR1 reaches the launcher twice (directly and forwarded by the batch shell): the
    second came between the first's write and its rename, whose file it had already renamed (the CI's
    FileNotFoundError). Here the second is sent from inside the first's rename."""
    signals = notebook._Signals(run_dir / "notebook")
    before = signal.signal(signal.SIGUSR1, signals._warn)
    real_replace, sent = os.replace, []

    def replace_after_a_second_signal(src, dst):
        if not sent:
            sent.append(src)
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.1)  # the handler runs here, nested
        real_replace(src, dst)

    monkeypatch.setattr(notebook.os, "replace", replace_after_a_second_signal)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert sent and int((run_dir / "notebook" / "warning").read_text()) > 0
    assert capsys.readouterr().out.splitlines() == [notebook.NOTICE]
    assert sorted(p.name for p in (run_dir / "notebook").iterdir()) == ["token", "warning"]  # no tmp left


def test_the_kernels_see_the_runs_code_first_and_jupyter_writes_under_the_run(run_dir, monkeypatch):
    monkeypatch.chdir(run_dir / "code")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv("JUPYTER_RUNTIME_DIR", raising=False)
    env = notebook.jupyter_env(TOKEN, run_dir / "notebook")
    assert env["PYTHONPATH"] == f"{run_dir / 'code'}{os.pathsep}/elsewhere"
    assert env["JUPYTER_TOKEN"] == TOKEN
    assert Path(env["JUPYTER_RUNTIME_DIR"]).is_relative_to(run_dir / "notebook")


def test_the_server_dies_with_a_launcher_killed_outright(tmp_path):
    """SIGKILL leaves the launcher no time to stop JupyterLab, which runs in a session of its own: the kernel ends it."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; from cluster_train.image.notebook import die_with_parent; "
                               "child = subprocess.Popen(['sleep', '60'], start_new_session=True, "
                               "preexec_fn=die_with_parent); print(child.pid, flush=True); child.wait()"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    server_pid = int(launcher.stdout.readline())
    launcher.kill()
    launcher.wait(10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{server_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{server_pid}").exists()
