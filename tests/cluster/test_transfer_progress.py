"""A file sent to a cluster over SSH (cluster_train/host/remote/sync.py, the real rsync to the test's real sshd,
tests/ssh/login.py) shows its progress as the command line renders it (cluster_train/host/status_line.py): one status
line rewritten in place, cut to the terminal's width and erased at the end, on a terminal (a pty); plain lines in a
pipe. Both resume a copy an earlier, interrupted one left there, and say so. rsync is held to 4 MB/s (a --bwlimit
put in front of it on PATH) so that a 16 MB file takes ~3 s: long enough to be seen moving."""
import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "ssh"))
import login  # noqa: E402  (tests/ssh/login.py: the test's OpenSSH server)

SIZE = 16 * 2**20
ARRIVED = 4 * 2**20  # what an interrupted copy left there
COLUMNS = 72  # the pty's width: the status line is cut to it

SENDER = """
import sys
from cluster_train.host.reach import Reach
from cluster_train.host.remote import sync
from cluster_train.host.status_line import StatusLine

config, path, remote = sys.argv[1:]
shown = StatusLine()
sent = sync.transfer(Reach("ci-slurm", "ct-login", "/unused", config=config), path, remote, shown)
shown.close()
print(f"sent {sent} bytes", file=sys.stderr)
"""


@pytest.fixture(scope="module")
def login_node(tmp_path_factory):
    """The test's sshd; the senders' environment: first on PATH an rsync held to 4 MB/s, and a cache of their own
    for the shared connection (a short path: a socket's name has at most 107 bytes), closed at the end."""
    base = tmp_path_factory.mktemp("sshd")
    proc, config, _ = login.start(base)
    slow = base / "bin"
    slow.mkdir()
    (slow / "rsync").write_text('#!/bin/sh\nexec /usr/bin/rsync --bwlimit=4000 "$@"\n')
    (slow / "rsync").chmod(0o755)
    cache = tempfile.mkdtemp(prefix="ct-progress-", dir="/tmp")
    env = {**os.environ, "PATH": f"{slow}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": cache}
    yield config, base, env
    subprocess.run(["ssh", "-F", str(config), "-o", f"ControlPath={cache}/cluster-train/ssh/%C", "-O", "exit",
                    "ct-login"], capture_output=True)
    shutil.rmtree(cache, ignore_errors=True)
    proc.terminate()
    proc.wait(10)


def sending(login_node, tmp_path):
    """(argv of the sender, environment, the file's bytes, where it goes there), a copy already begun there."""
    config, base, env = login_node
    data = os.urandom(SIZE)
    (tmp_path / "image.sif").write_bytes(data)
    remote = base / tmp_path.name / "incoming" / "image.sif"
    remote.parent.mkdir(parents=True)
    remote.write_bytes(data[:ARRIVED])
    return [sys.executable, "-c", SENDER, str(config), str(tmp_path / "image.sif"), str(remote)], env, data, remote


@pytest.mark.slow  # a real sshd, 16 MB through it at 4 MB/s
def test_a_transfer_in_a_pipe_says_plain_lines_that_it_resumed_and_how_far_it_is(login_node, tmp_path):
    argv, env, data, remote = sending(login_node, tmp_path)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "\r" not in done.stderr and "\x1b" not in done.stderr, done.stderr
    progress, said = lines[:-1], lines[-1]
    assert all(line.startswith("sending image.sif to ci-slurm: ") for line in progress), lines
    assert all("resuming from 4.2 MB" in line for line in progress), lines
    assert "16.8 MB of 16.8 MB (100 %)" in progress[-1] and " in " in progress[-1], lines  # the final line, once
    assert not any("(100 %)" in line for line in progress[:-1]), lines
    assert any("MB/s" in line and " left" in line for line in progress[:-1]), lines  # a rate and the time left
    assert 2 <= len(progress) <= 10, lines  # every 10 % at most (and the last), not every rsync update
    assert remote.read_bytes() == data and int(said.split()[1]) < SIZE - ARRIVED // 2, said  # only the rest sent


def terminal_output(argv, env) -> bytes:
    """What the sender wrote to a terminal COLUMNS wide (its standard error a pty)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    out = b""
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the pty's other end closed: the sender has ended
            break
        if not chunk:
            break
        out += chunk
    proc.wait(10)
    os.close(leader)
    assert proc.returncode == 0, out
    return out


@pytest.mark.slow  # a real sshd, 16 MB through it at 4 MB/s
def test_a_transfer_on_a_terminal_rewrites_one_line_of_its_width_and_erases_it(login_node, tmp_path):
    argv, env, data, remote = sending(login_node, tmp_path)
    out = terminal_output(argv, env).decode()
    status, said = out.rsplit("\r\x1b[K", 1)  # the line erased at the end, then what the command says
    assert said.strip().startswith("sent "), out
    drawn = [line for line in status.split("\r\x1b[K") if line]
    assert len(drawn) >= 3 and "\n" not in status, out  # rewritten in place, never a new line
    assert all(len(line) <= COLUMNS - 1 for line in drawn), drawn  # cut to the terminal's width
    assert any(len(line) == COLUMNS - 1 for line in drawn), drawn  # (the whole line would be longer)
    assert drawn[0].startswith("sending image.sif to ci-slurm: 4.2 MB of"), drawn
    assert any(" MB of 16.8 MB (" in line and "MB/s" in line for line in drawn[1:]), drawn
    assert remote.read_bytes() == data
