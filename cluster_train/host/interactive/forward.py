"""A local port carried to a port on a compute node. On the login node a small TCP relay in this process does it: the
login node reaches the compute node directly, and the relay ends with the command. From a laptop OpenSSH does it,
over the cluster's shared connection (cluster_train/host/remote/ssh.py): `ssh -O forward -L` asks the connection's
master to listen here and open each connection from the login node (a plain `ssh -N -L` would hand the forward to
the master too, and return at once), `ssh -O cancel -L` ends it. Both listen on 127.0.0.1 only: the notebook's token
is the one guard of a kernel that runs code as you."""
import contextlib
import socket
import socketserver
import subprocess
import threading
from typing import Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.reach import Reach
from cluster_train.host.remote import ssh

LOCAL = "127.0.0.1"
CHUNK = 65536


def port_taken(port: int) -> bool:
    """Whether something here already listens on (or holds) 127.0.0.1:port."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as listeners bind: TIME_WAIT is no owner
        try:
            probe.bind((LOCAL, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOCAL, 0))
        return probe.getsockname()[1]


def local_port(asked: int) -> int:
    """The port to listen on here: the one asked for (0: any free one), refused in one line when it is taken."""
    if not asked:
        return free_port()
    if not 0 < asked < 65536:
        raise UserError(f"--port {asked} is not a TCP port; pick one from 1024 to 65535, e.g. --port {free_port()}")
    if port_taken(asked):
        raise UserError(f"port {asked} is already taken on this machine; pick another, e.g. --port {free_port()} "
                        f"(or leave --port out for any free one)")
    return asked


def pump(source: socket.socket, sink: socket.socket) -> None:
    """One direction of a connection, until its end; the other side then sees the end too."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


class Relay(socketserver.ThreadingTCPServer):
    """127.0.0.1:port here (or host:port) -> target, each connection carried both ways by two threads (JupyterLab's websockets stay
    open for the session, so one thread per direction, not a poll loop)."""

    daemon_threads = True  # a browser's open connection does not hold the command's end
    allow_reuse_address = True  # a port left in TIME_WAIT by the last notebook is free to listen on again

    def __init__(self, port: int, target: Tuple[str, int], host: str = LOCAL) -> None:
        self.target = target
        super().__init__((host, port), Carry)
        threading.Thread(target=self.serve_forever, name="notebook-relay", daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class Carry(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            upstream = socket.create_connection(self.server.target, timeout=10)
        except OSError:  # the server stopping: the browser sees the connection close
            return
        upstream.settimeout(None)
        with upstream:
            back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
            back.start()
            pump(self.request, upstream)
            back.join()


def relay(port: int, target: Tuple[str, int]) -> Relay:
    """The relay, listening; one line when the port was taken meanwhile."""
    try:
        return Relay(port, target)
    except OSError as err:
        raise UserError(f"port {port} cannot be listened on here ({err.strerror}); pick another with --port") from None


def spec(port: int, target: Tuple[str, int]) -> str:
    return f"{LOCAL}:{port}:{target[0]}:{target[1]}"


def ssh_forward(reach: Reach, port: int, target: Tuple[str, int]) -> None:
    """127.0.0.1:port here -> target as the login node reaches it, by the shared connection's master."""
    done = subprocess.run([*ssh.ssh_argv(reach), "-O", "forward", "-L", spec(port, target), reach.destination],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise UserError(f"{ssh.where(reach)}: the forward of port {port} here to {target[0]}:{target[1]} failed "
                        f"({said[-1] if said else 'ssh said nothing'}); pick another port with --port")


def ssh_cancel(reach: Reach, port: int, target: Tuple[str, int]) -> None:
    """The forward ended (quietly: a connection already gone took it along)."""
    subprocess.run([*ssh.ssh_argv(reach), "-O", "cancel", "-L", spec(port, target), reach.destination],
                   capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
