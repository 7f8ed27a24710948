"""Fixtures only the real-component tests use: the OCI registry, the MLflow server as the nodes reach it, the LSF
stand-in on PATH, the sshd that plays a login node (tests/ssh/login.py), and `make demo` run once in a clean clone
(its finished run reused as `demo_run`)."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import MLFLOW_SERVERS, ROOT

sys.path.insert(0, str(ROOT / "tests" / "ssh"))
import login  # noqa: E402  (tests/ssh/login.py: the test's OpenSSH server)

# The last line `make demo` prints (Makefile): the run it trained and where that run's report is
DEMO_DONE = re.compile(r"^make demo: run (\S+) finished; its report: (\S+)$", re.M)


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory):
    """A real OCI registry on 127.0.0.1 (the CNCF distribution registry, Debian's docker-registry), plain HTTP,
    storing in a temporary directory; "127.0.0.1:PORT"."""
    import shutil
    import socket
    import urllib.request

    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.fail("docker-registry is not installed: run `make registry` (make test does)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tmp_path_factory.mktemp("registry")
    (tmp / "config.yml").write_text(f"version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: "
                                    f"{tmp / 'data'}}}, delete: {{enabled: "
                                    f"true}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n")
    with (tmp / "log").open("w") as log:
        proc = subprocess.Popen([exe, "serve", str(tmp / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"the registry did not answer on 127.0.0.1:{port}: {(tmp / 'log').read_text()[-2000:]}")
            time.sleep(0.1)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def mlflow_for_nodes(mlflow_server, slurm_cluster):
    """The MLflow server as the test cluster's nodes reach it: their network is the bridge's 10.77.0.0/24 only (as
    compute nodes often reach only the login node), so a relay on the bridge's 10.77.0.1 carries each connection to
    the server on 127.0.0.1, as an `ssh -L` tunnel on a login node would."""
    from cluster_train.host.interactive.forward import Relay  # the notebook's relay: the same job

    relay = Relay(0, ("127.0.0.1", int(mlflow_server.rsplit(":", 1)[1])), host="10.77.0.1")
    url = f"http://10.77.0.1:{relay.server_address[1]}"
    MLFLOW_SERVERS[url] = MLFLOW_SERVERS[mlflow_server]
    yield url
    relay.stop()


@pytest.fixture(scope="module")
def login_node(tmp_path_factory):
    """The test's sshd: (client config, base directory, ports); every shared connection closed at the end."""
    from cluster_train.host.remote import ssh

    base = tmp_path_factory.mktemp("sshd")
    proc, config, ports = login.start(base, f"{ROOT / 'tests' / 'lsf'}:")  # the LSF stand-in's commands too
    yield config, base, ports
    for host in ports:
        subprocess.run(["ssh", "-F", str(config), "-o", f"ControlPath={ssh.control_dir()}/%C", "-O", "exit", host],
                       capture_output=True)
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def lsf_path(monkeypatch, tmp_path):
    """The LSF stand-in (tests/lsf) first on PATH, with its own state directory."""
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'lsf'}:{os.environ['PATH']}")
    monkeypatch.setenv("CT_LSF_STATE", str(tmp_path / "lsf"))


def clone_of_the_checkout(dest: Path) -> None:
    """`git clone` of this checkout, with its uncommitted changes (tracked and untracked, not ignored) copied over:
    nothing ignored (.venv, images/, data/, runs/) comes along."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():  # deleted in the working tree
            if dst.is_file():
                dst.unlink()
        elif src.is_file() and not src.is_symlink() and (not dst.is_file() or dst.read_bytes() != src.read_bytes()):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def readme_host_env(refused: Path) -> dict:
    """This environment as a fresh machine's that has only what the README asks of the host: no CT_ settings, no make
    flags, no host venv on PATH, and a python3 that imports only the standard library, pyyaml and jinja2
    (tests/cluster/readme_host/sitecustomize.py, which lists each import it refused in `refused`)."""
    venvs = (str(ROOT / ".venv"), *([sys.prefix] if sys.prefix != sys.base_prefix else []))  # never /usr itself
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CT_", "MAKE", "MFLAGS", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(venvs))
    env["PYTHONPATH"] = str(ROOT / "tests" / "cluster" / "readme_host")
    env["CT_REFUSED_IMPORTS"] = str(refused)
    return env


@pytest.fixture(scope="session")
def made_demo(cpu_image, tmp_path_factory):
    """`make demo` in a clean clone, once a session. Nothing is built: CT_IMAGES points the clone at the image store
    `make test` built into (containers/images.mk reads it as IMAGES_DIR; the clone's image inputs are the checkout's,
    so the stamp there is current), and the demo's data set is written into the clone's data/ by the same generator
    `make data` runs in the image (its target file then exists). Its clone, make's output, the time it took and the
    imports the host's python3 refused."""
    from cluster_train.image.data.cifar100 import generate_cifar100

    tmp = tmp_path_factory.mktemp("demo")
    clone = tmp / "clone"
    clone_of_the_checkout(clone)
    generate_cifar100(clone / "data" / "cifar100-synthetic")  # `python -m train make_data cifar100`, in-process
    env = readme_host_env(tmp / "refused-imports")
    env["CT_IMAGES"] = str(ROOT / "images")
    started = time.time()
    done = subprocess.run(["make", "--no-print-directory", "demo"], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=900)
    seconds = time.time() - started
    refused = (tmp / "refused-imports").read_text().split() if (tmp / "refused-imports").exists() else []
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    return SimpleNamespace(clone=clone, clone_head=head, done=done, seconds=seconds, refused=refused)


@pytest.fixture(scope="session")
def demo_run(made_demo) -> Path:
    """The finished run `make demo` trained in a clean clone (made_demo): runs/<id> with its report.html, for tests
    that need a real finished run without training one."""
    done = made_demo.done
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    said = DEMO_DONE.search(done.stdout)
    assert said, done.stdout[-3000:]
    return made_demo.clone / "runs" / said.group(1)
