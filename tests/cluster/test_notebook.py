"""`run-cluster notebook` (cluster_train/host/interactive): from the "laptop" (this checkout) over the test sshd to the
test Slurm cluster, JupyterLab starts from the image on a node; the test reaches it through the forwarded port with
the token, runs a cell in a kernel started through Jupyter's REST API (over its websocket), opens the lab in headless
Chromium, sees the time-limit notice, and after Ctrl-C finds nothing left in the queue. One notebook serves every
check. The relay and the refusals before anything is queued (a taken port, an image without JupyterLab) are fast
tests of their own."""
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, run_cluster

from cluster_train.shared.errors import UserError
from cluster_train.host.interactive import forward

URL = re.compile(r"notebook on (\S+): (http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+))$", re.M)
START_TIMEOUT_S = 240  # the queue, the first JupyterLab start on a loaded two-core machine


def echo_server() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_the_relay_carries_both_ways_and_a_taken_port_is_one_line_naming_another():
    with echo_server() as target:
        port = forward.local_port(0)
        relay = forward.relay(port, target.getsockname())
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(b"kernel")
                assert conn.recv(16) == b"KERNEL"
            with pytest.raises(UserError) as taken:
                forward.local_port(port)  # the relay holds it now
        finally:
            relay.stop()
    said = str(taken.value)
    assert f"port {port} is already taken" in said and "--port " in said and "\n" not in said
    other = int(re.search(r"--port (\d+)", said).group(1))
    assert other != port and not forward.port_taken(other)


def queued_by(env) -> list:
    runs = Path(env["CT_RUNS_DIR"])
    return list(runs.iterdir()) if runs.exists() else []


@pytest.mark.slurm
def test_a_taken_port_and_an_image_without_jupyterlab_are_refused_before_anything_is_queued(tmp_path):
    from host.test_image_commands import FLAVOR_LABELS, build_sif

    (tmp_path / "settings.yaml").write_text("{}\n")
    env = {**os.environ, "CT_SETTINGS": str(tmp_path / "settings.yaml"), "CT_RUNS_DIR": str(tmp_path / "runs"),
           "CT_IMAGES": str(tmp_path / "store")}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = run_cluster("notebook", "ci-slurm", "n1_gpu1", "--port", str(port), env=env)
    assert done.returncode == 2 and f"port {port} is already taken on this machine; pick another" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and not queued_by(env)
    old = build_sif(tmp_path / "old" / "cpu.sif", FLAVOR_LABELS)  # a cpu image labelled as builds were before
    assert run_cluster("images", "import", str(old), env=env).returncode == 0
    done = run_cluster("notebook", "ci-slurm", "n1_gpu1", env=env)
    assert done.returncode == 2 and "JupyterLab is not in the cpu image" in done.stderr, done.stderr
    assert "make image FLAVOR=cpu" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not queued_by(env)


# ---- one notebook, from the laptop over ssh ------------------------------------------------------------------------

def read_until_url(proc: subprocess.Popen, lines: list) -> re.Match:
    """The command's lines as they come (kept in `lines`), until the URL."""
    deadline = time.monotonic() + START_TIMEOUT_S
    for line in proc.stdout:
        lines.append(line)
        found = URL.search(line)
        if found:
            return found
        if time.monotonic() > deadline:
            break
    proc.kill()
    pytest.fail(f"no URL from run-cluster notebook: {''.join(lines)[-3000:]}{proc.stderr.read()[-2000:]}")


@pytest.fixture(scope="module")
def notebook(login_node, cpu_image, slurm_cluster, tmp_path_factory):
    """`run-cluster notebook ci-slurm n1_gpu1` from the laptop, running; the cluster's image store is this
    checkout's (nothing to send). Ended with SIGINT by the last test, else here."""
    config, base, _ = login_node
    tmp = tmp_path_factory.mktemp("notebook-laptop")
    cluster = base / "notebook-cluster"
    (tmp / "settings.yaml").write_text(json.dumps({"clusters": {"ci-slurm": {
        "ssh": "ct-login", "ssh_config": str(config), "remote_dir": str(cluster / "cluster-train"),
        "runs": str(cluster / "runs"), "images": str(Path(cpu_image.path).parent)}}}))
    env = {**os.environ, "CT_SETTINGS": str(tmp / "settings.yaml"), "CT_RUNS_DIR": str(tmp / "runs")}
    proc = subprocess.Popen([str(ROOT / "bin" / "run-cluster"), "notebook", "ci-slurm", "n1_gpu1", "--time", "00:10:00"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines = []
    found = read_until_url(proc, lines)
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    run_dir = next((cluster / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    yield SimpleNamespace(proc=proc, host=found.group(1), url=found.group(2), port=int(found.group(3)),
                          token=found.group(4), run_dir=run_dir, job_id=manifest["scheduler"]["job_id"], lines=lines)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    subprocess.run(["scancel", manifest["scheduler"]["job_id"]], capture_output=True)


def api(nb, method: str, path: str, body=None) -> dict:
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{nb.port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"token {nb.token}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read() or b"{}")


async def run_cell(nb, kernel_id: str, code: str) -> str:
    """The cell's output: an execute_request over the kernel's websocket, its stream replies until the kernel idles."""
    import aiohttp

    msg_id = uuid.uuid4().hex
    request = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": msg_id,
                          "version": "5.3"}, "parent_header": {}, "metadata": {}, "channel": "shell",
               "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                           "allow_stdin": False}}
    out = []
    url = f"ws://127.0.0.1:{nb.port}/api/kernels/{kernel_id}/channels?token={nb.token}"
    async with aiohttp.ClientSession() as session, session.ws_connect(url, timeout=60) as ws:
        await ws.send_str(json.dumps(request))
        async for message in ws:
            reply = json.loads(message.data)
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = reply["msg_type"], reply["content"]
            out += [content["text"]] if kind == "stream" else []
            out += [f"{content['ename']}: {content['evalue']}"] if kind == "error" else []
            if kind == "status" and content["execution_state"] == "idle":
                return "".join(out)
    return "".join(out)


@pytest.mark.image
@pytest.mark.slurm
def test_a_cell_imports_the_image_s_torch_and_the_run_s_code_snapshot(notebook):
    assert api(notebook, "GET", "/api/status")  # the token opens it, through the forwarded port
    kernel = api(notebook, "POST", "/api/kernels", {"name": "python3"})
    code = ("import os, socket, torch, cluster_train\n"
            "print(torch.__version__, torch.__file__, socket.gethostname(), os.getcwd(), cluster_train.__file__)")
    said = asyncio.run(asyncio.wait_for(run_cell(notebook, kernel["id"], code), 120)).split()
    assert len(said) == 5, said
    assert re.match(r"\d+\.\d+", said[0]) and said[1].startswith("/opt/venv/"), said  # the image's torch
    assert said[2] == notebook.host == "n1", said
    code_dir = str(notebook.run_dir / "code")  # the run's code snapshot, first on the kernel's path
    assert said[3] == code_dir and said[4] == f"{code_dir}/cluster_train/__init__.py", said
    assert "--time=00:10:00" in (notebook.run_dir / "job.sh").read_text()


@pytest.mark.image
@pytest.mark.slurm
def test_the_lab_opens_in_headless_chromium_without_console_errors(notebook, tmp_path):
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: run `make chromium` (make test does)")
    done = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'c'}",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--dump-dom",
                           notebook.url], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-3000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    assert "jp-LabShell" in done.stdout or "JupyterLab" in done.stdout, done.stdout[-2000:]


@pytest.mark.image
@pytest.mark.slurm
def test_the_time_limit_warning_is_said_and_ctrl_c_leaves_nothing_in_the_queue(notebook):
    subprocess.run(["scancel", "--batch", "--signal=USR1", notebook.job_id], check=True)  # as sbatch --signal=B:USR1
    deadline = time.monotonic() + 30
    while not any("the allocation ends soon" in line for line in notebook.lines) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert any("save your notebooks" in line for line in notebook.lines), notebook.lines
    notebook.proc.send_signal(signal.SIGINT)
    assert notebook.proc.wait(120) == 0, notebook.proc.stderr.read()
    time.sleep(0.5)  # the reader thread's last lines
    assert "nothing is allocated" in notebook.lines[-1], notebook.lines
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout.split()
    assert notebook.job_id not in queued
    assert not forward.port_taken(notebook.port)  # the forward is gone with it
