"""Fixtures only the real-component tests use: the OCI registry, the MLflow server as the nodes reach it, the LSF
stand-in on PATH."""
import contextlib
import os
import subprocess
import time

import pytest
from conftest import MLFLOW_SERVERS, ROOT


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
    import socket
    import socketserver
    import threading

    target = ("127.0.0.1", int(mlflow_server.rsplit(":", 1)[1]))

    def pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    class Relay(socketserver.BaseRequestHandler):
        def handle(self):
            try:
                upstream = socket.create_connection(target)
            except OSError:  # the server not started yet: the client sees the connection close, and retries
                return
            with upstream:
                back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
                back.start()
                pump(self.request, upstream)
                back.join(60)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True  # a connection left open does not hold the session's end

    relay = Server(("10.77.0.1", 0), Relay)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    url = f"http://10.77.0.1:{relay.server_address[1]}"
    MLFLOW_SERVERS[url] = MLFLOW_SERVERS[mlflow_server]
    yield url
    relay.shutdown()
    relay.server_close()


@pytest.fixture
def lsf_path(monkeypatch, tmp_path):
    """The LSF stand-in (tests/lsf) first on PATH, with its own state directory."""
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'lsf'}:{os.environ['PATH']}")
    monkeypatch.setenv("CT_LSF_STATE", str(tmp_path / "lsf"))
