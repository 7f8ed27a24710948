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
from conftest import ROOT, ctrl_c_as_at_a_terminal, run_cluster

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
    assert len(done.stderr.splitlines()) == 1 and not list((tmp_path / "runs").glob("*"))
    old = build_sif(tmp_path / "old" / "cpu.sif", FLAVOR_LABELS)  # a cpu image labelled as builds were before
    assert run_cluster("images", "import", str(old), env=env).returncode == 0
    done = run_cluster("notebook", "ci-slurm", "n1_gpu1", env=env)
    assert done.returncode == 2 and "JupyterLab is not in the cpu image" in done.stderr, done.stderr
    assert "make image FLAVOR=cpu" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not list((tmp_path / "runs").glob("*"))


@pytest.mark.slurm
def test_dev_runs_the_kernel_in_this_directory_bound_live_and_time_only_shortens(cpu_image):
    import argparse

    from cluster_train.host.interactive import notebook
    from cluster_train.host.jobs.build import Site

    def built(**given):
        asked = dict(cluster="ci-slurm", profile="n1_gpu1", experiment=None, dev=False, time=None, flavor=None,
                     run_id=None, stale_image_ok=False)
        sub = notebook.submission(Site.load("ci-slurm"), argparse.Namespace(**{**asked, **given}))
        sub.discard()
        return sub

    sub = built(dev=True, time="00:05:00")
    here = str(Path.cwd().resolve())
    assert f"{here}:{here}" in sub.job.work.binds and sub.run.command[-3:] == notebook.LAUNCHER
    assert sub.run.command[:2] == ["bash", "-c"] and sub.run.command[4] == here
    assert "--time=00:05:00" in sub.script and sub.job.placement.max_requeues == 0
    assert sub.job.placement.grace_s == 150  # the profile's 300 s warning would come at the start: halfway instead
    for time_limit, said in (("10:00:00", "--time 10:00:00 is longer than the profile's time limit 00:20:00"),
                             ("banana", "--time 'banana' is not a Slurm time limit")):
        with pytest.raises(UserError, match=re.escape(said)):
            built(time=time_limit)


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
def laptop(login_node, cpu_image, slurm_cluster, tmp_path_factory):
    """The laptop's environment: ci-slurm reached over ssh at ct-login, whose image store is this checkout's (nothing
    to send), its runs under the sshd's directory."""
    config, base, _ = login_node
    tmp = tmp_path_factory.mktemp("notebook-laptop")
    cluster = base / "notebook-cluster"
    (tmp / "settings.yaml").write_text(json.dumps({"clusters": {"ci-slurm": {
        "ssh": "ct-login", "ssh_config": str(config), "remote_dir": str(cluster / "cluster-train"),
        "runs": str(cluster / "runs"), "images": str(ROOT / "images")}}}))
    env = {**os.environ, "CT_SETTINGS": str(tmp / "settings.yaml"), "CT_RUNS_DIR": str(tmp / "runs")}
    return SimpleNamespace(env=env, runs=cluster / "runs", config=config)


def start(laptop, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(ROOT / "bin" / "run-cluster"), "notebook", "ci-slurm", "n1_gpu1", *args],
                            env=laptop.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=ctrl_c_as_at_a_terminal)


@pytest.fixture(scope="module")
def notebook(laptop):
    """`run-cluster notebook ci-slurm n1_gpu1` from the laptop, running. Ended with SIGINT by the last test that uses
    it, else here."""
    proc = start(laptop, "--time", "00:10:00", "--run-id", "notebook")
    lines = []
    found = read_until_url(proc, lines)
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    run_dir = laptop.runs / "notebook"
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
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
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
    assert re.match(r"\d+\.\d+", said[0]) and said[1].startswith("/usr/lib/python3/dist-packages/torch/"), said
    assert not Path(said[1]).exists()  # the image's Debian torch, not a file of this machine
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
    errors = [line for line in console if ":INFO:CONSOLE" not in line]  # console.log: the lab's own progress
    assert console and not errors, console  # it ran its scripts, and none warned or failed
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
    assert not in_queue(notebook.job_id)
    assert not forward.port_taken(notebook.port)  # the forward is gone with it


def in_queue(job_id: str) -> bool:
    return job_id in subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()


@pytest.mark.image
@pytest.mark.slurm
def test_a_dropped_connection_is_one_line_and_the_login_node_cancels_the_job(laptop):
    """The shared connection ends under the session (here: its master told to exit, as a network drop ends it)."""
    from cluster_train.host.remote import ssh

    proc = start(laptop, "--run-id", "dropped")
    for line in proc.stdout:
        if "queued" in line:
            break
    job_id = re.search(r"job (\d+) queued", line).group(1)
    subprocess.run(["ssh", "-F", str(laptop.config), "-o", f"ControlPath={ssh.control_dir()}/%C", "-O", "exit",
                    "ct-login"], capture_output=True, check=True)
    assert proc.wait(60) == 2
    said = proc.stderr.read().strip().splitlines()
    assert len(said) == 1 and "ci-slurm over ssh (ct-login): the connection dropped" in said[0], said
    deadline = time.monotonic() + 60
    while in_queue(job_id) and time.monotonic() < deadline:
        time.sleep(1)
    assert not in_queue(job_id)


@pytest.mark.image
@pytest.mark.slurm
def test_on_the_login_node_dev_gives_the_kernel_this_checkout_live_through_the_relay(cpu_image, slurm_cluster,
                                                                                     tmp_path):
    """No ssh: the command's own relay carries the port; --dev runs the kernel in this checkout, not a snapshot.
    Ended by SIGTERM (as a batch system or `kill` ends it), which cancels the job as Ctrl-C does."""
    (tmp_path / "settings.yaml").write_text("{}\n")
    env = {**os.environ, "CT_SETTINGS": str(tmp_path / "settings.yaml"), "CT_RUNS_DIR": str(tmp_path / "runs")}
    proc = start(SimpleNamespace(env=env), "--dev")
    lines = []
    try:
        found = read_until_url(proc, lines)
        nb = SimpleNamespace(port=int(found.group(3)), token=found.group(4))
        kernel = api(nb, "POST", "/api/kernels", {"name": "python3"})
        code = "import os, cluster_train\nprint(os.getcwd(), cluster_train.__file__)"
        said = asyncio.run(asyncio.wait_for(run_cell(nb, kernel["id"], code), 120)).split()
        assert said == [str(ROOT), str(ROOT / "cluster_train" / "__init__.py")], said
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            ended = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            ended = None
        job_id = json.loads(next((tmp_path / "runs").glob("*/manifest.json")).read_text())["scheduler"]["job_id"]
        if ended != 0:
            subprocess.run(["scancel", job_id], capture_output=True)  # a failed test leaves no job holding a node
    assert ended == 0, proc.stderr.read()
    said = proc.stdout.read().strip().splitlines()
    assert said[-1] == f"[cluster-train] notebook stopped by SIGTERM; job {job_id} cancelled, nothing is allocated", said
    assert not in_queue(job_id)
    assert not forward.port_taken(nb.port)  # the relay ended with the command
    status = run_cluster("status", next((tmp_path / "runs").iterdir()), env=env).stdout
    assert "cause: cancelled by bin/run-cluster cancel at" in status, status  # its own cancel, recorded
