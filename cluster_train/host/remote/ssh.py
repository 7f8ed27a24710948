"""One OpenSSH connection per cluster, opened once and reused (ControlMaster/ControlPersist: a password or 2FA prompt
happens once, every later command rides on it); the user's ~/.ssh/config, keys, agent and known_hosts are honoured
and host keys are always checked (no option here turns that off). Every remote command is built from a list of
words, each quoted for the remote shell, so a value reaches the cluster as data, never as code.
Written over the ssh client, not a Python SSH library: only OpenSSH reads the user's config, agent and 2FA as is."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from cluster_train.shared.errors import UserError
from cluster_train.host import undecodable
from cluster_train.host.reach import Reach

PERSIST = "10m"  # the shared connection outlives a command by this much (`runs` refreshing every cluster, a --follow)


def control_dir() -> Path:
    """Sockets of the shared connections: private to the user (a socket there is a logged-in session)."""
    base = Path(undecodable.environ("XDG_CACHE_HOME") or Path.home() / ".cache") / "cluster-train" / "ssh"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def ssh_argv(reach: Reach, batch: bool = False) -> List[str]:
    """`ssh` with the cluster's options and the shared connection; batch: never prompt (parallel refreshes)."""
    argv = ["ssh"]
    if reach.config:
        argv += ["-F", str(Path(reach.config).expanduser())]
    if reach.port:
        argv += ["-p", str(reach.port)]
    if reach.jump:
        argv += ["-J", reach.jump]
    argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir()}/%C", "-o", f"ControlPersist={PERSIST}"]
    return argv + (["-o", "BatchMode=yes"] if batch else [])


def word(text: str) -> str:
    """One word for the remote shell; a path under ~ keeps its ~ expanded there."""
    if text == "~" or text.startswith("~/"):
        return '"$HOME"' + shlex.quote(text[1:]) if len(text) > 1 else '"$HOME"'
    return shlex.quote(text)


def remote_line(argv: Sequence[str], cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> str:
    """The command line the remote shell runs: cd, variables and the command, every part quoted."""
    line = ["env", *[f"{k}={word(v)}" for k, v in (env or {}).items()], *map(word, argv)]
    return (f"cd {word(cwd)} && " if cwd else "") + " ".join(line)


def run(reach: Reach, argv: Sequence[str], cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
        capture: bool = False, input: Optional[str] = None, batch: bool = False) -> subprocess.CompletedProcess:
    """The command on the cluster; its output streamed to ours unless captured. An ssh failure is one line."""
    full = [*ssh_argv(reach, batch), "--", reach.destination, remote_line(argv, cwd, env)]
    done = subprocess.run(full, text=True, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE)
    if done.returncode == 255:
        raise UserError(failure_line(reach, done.stderr))
    if done.returncode == 127:  # env (or the login shell) found no such command there
        raise UserError(f"{where(reach)} has no {argv[0]}; install it there, load its "
                        f"module in your login shell's startup file, or name another in your settings "
                        f"(remote_python: for Python)")
    if done.stderr and not capture:
        print(done.stderr.replace("run-cluster: error: ", f"run-cluster: error: {where(reach)}: "), end="",
              file=sys.stderr)
    return done


def where(reach: Reach) -> str:
    return f"{reach.cluster} over ssh ({reach.destination})"


FAILURES = (  # what ssh says -> what it means and the fix; the first that matches is the cause
    # first: a full disk there ends the receiver, and the sender then reports a broken pipe, an effect
    (r"No space left on device|Disk quota exceeded",
     "the disk or your quota there is full ({reason}); free space there or point remote_dir: (and runs:, images:) "
     "at your scratch directory, then try again (nothing was queued)"),
    (r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed|No .* host key is known",
     "its host key is not the one your known_hosts holds for it (changed, or never seen); confirm the new key with "
     "the site, then `KEYGEN` and connect once with `ssh DEST` to accept it"),
    (r"Permission denied|Too many authentication failures",
     "it refused your key (Permission denied); load it with ssh-add or name it in ~/.ssh/config (IdentityFile), "
     "then check with `ssh DEST`"),
    (r"Connection refused|timed out|No route to host|Could not resolve|Name or service not known|Network is unreachable"
     r"|Connection closed( \(ssh ended without a word\))?|Connection reset|closed by remote host|Broken pipe",
     "it cannot be reached or the connection dropped ({reason}); check ssh: in your settings, the network or VPN the "
     "site requires, and try again (what was sent is not sent twice)"),
)


def failure_line(reach: Reach, stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:  # a shared connection that ended under a running command: ssh exits 255 and says nothing
        stderr = "Connection closed (ssh ended without a word)"
    last = lines[-1] if lines else stderr
    for pattern, meaning in FAILURES:
        found = re.search(pattern, stderr)
        if found:
            said = meaning.replace("DEST", reach.destination).format(reason=found.group(0))
            said = said.replace("KEYGEN", forget_key(reach)) if "KEYGEN" in said else said
            return f"{where(reach)}: {said}"
    return f"{where(reach)}: {last}; check with `ssh {reach.destination}`"


def forget_key(reach: Reach) -> str:
    """`ssh-keygen -R` for the host and port ssh really connects to, in the known_hosts it really reads: a Host of
    ~/.ssh/config may give its own HostName, Port and UserKnownHostsFile, which `ssh -G` resolves."""
    done = subprocess.run([*ssh_argv(reach), "-G", reach.destination], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    host, port = said.get("hostname", reach.destination.split("@")[-1]), said.get("port", "22")
    known = os.path.expanduser(said.get("userknownhostsfile", "~/.ssh/known_hosts").split()[0])  # where ssh adds keys
    return f"ssh-keygen -R {shlex.quote(host if port == '22' else f'[{host}]:{port}')} -f {shlex.quote(known)}"


def attached(reach: Reach, argv: Sequence[str], cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> int:
    """The command on the cluster with this terminal attached (ssh -t where ours is one): an interactive session.
    Its exit status; an ssh failure is one line."""
    tty = ["-t"] if os.isatty(0) else ["-T"]
    full = [*ssh_argv(reach), *tty, "--", reach.destination, remote_line(argv, cwd, env)]
    code = subprocess.run(full).returncode
    if code == 255:
        raise UserError(f"{where(reach)}: the connection failed or dropped (ssh exit status 255); check with "
                        f"`ssh {reach.destination}`")
    return code
