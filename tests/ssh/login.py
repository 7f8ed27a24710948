"""A real OpenSSH server playing a cluster's login node (Debian's openssh-server, `make sshd`): its own host key,
config and port on 127.0.0.1, one authorised test key; the client side gets its own ssh config and known_hosts
(host keys are checked, as always). Two ports: `ct-login` for the tests that submit, `ct-other` for the failures,
which must come before any shared connection to that port (a shared connection is reused without a new check, as
OpenSSH's multiplexing does for every user)."""
import socket
import subprocess
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


def start(base: Path, session_path: str = ""):
    """sshd on two ports; returns (process, client config path, ports). session_path: PATH and CT_LSF_STATE of every
    session, as a site's login shell sets them (here: the LSF stand-in's commands first)."""
    base.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    host_pub = keygen(base / "host_key")
    (base / "authorized_keys").write_text(keygen(base / "id_user") + "\n")
    keygen(base / "id_stranger")  # a key the server does not know
    ports = {"ct-login": free_port(), "ct-other": free_port()}
    (base / "sshd_config").write_text("".join(f"Port {p}\n" for p in ports.values()) + f"""ListenAddress 127.0.0.1
HostKey {base / 'host_key'}
PidFile {base / 'sshd.pid'}
AuthorizedKeysFile {base / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 50
Subsystem sftp internal-sftp
SetEnv PATH={session_path}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin CT_LSF_STATE={base / 'lsf'}
""")
    known = "".join(f"[127.0.0.1]:{p} {' '.join(host_pub.split()[:2])}\n" for p in ports.values())
    (base / "known_hosts").write_text(known)
    (base / "ssh_config").write_text("".join(f"""Host {name}
  HostName 127.0.0.1
  Port {port}
  User root
  IdentityFile {base / 'id_user'}
  IdentitiesOnly yes
  UserKnownHostsFile {base / 'known_hosts'}
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
""" for name, port in ports.items()))
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(base / "sshd_config")], stderr=open(base / "sshd.log", "w"))
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", ports["ct-login"]), 0.2).close()
            return proc, base / "ssh_config", ports
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"sshd did not start: {(base / 'sshd.log').read_text()}")
