"""`run-cluster shell` (issue 44) on the real test Slurm cluster, from the "laptop" over the test's sshd, and on the LSF
stand-in: a command's output and exit status from a node, an interactive shell driven through a pty, the bad cases
refused in one line before anything is queued, and Ctrl-C while the allocation pends withdrawing it. After each,
nothing of it is left in the queue."""
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, ctrl_c_as_at_a_terminal, manifest, run_cluster
from cluster.test_remote import close_shared

# the image's torch, as its lock pins it (the shell must import the image's, not this machine's)
TORCH = re.search(r"^torch==(\S+)", (ROOT / "containers" / "requirements" / "cpu.debian.txt").read_text(),
                  re.M).group(1)


@pytest.fixture(scope="module")
def demo(demo_data) -> list:
    """The demo experiment on the suite's generated data (a clean checkout has no data/ of its own)."""
    return ["demo", "--set", "data.num_workers=0", "--set", f"data.root={demo_data}"]


# the test cluster's file with two more profiles: one held pending for an hour (--begin), one no node fits
HELD = """profiles:
  held: {<<: *site, partition: ci, mem_gb: 1, directives: ["--begin=now+1hour"], description: "pends an hour"}
  eight_gpus: {<<: *site, partition: ci, gpus_per_node: 8, mem_gb: 14, description: "no node has 8 GPUs"}
"""


def try_released(run_dir: Path) -> bool:
    try:
        released(run_dir)
        return True
    except AssertionError:
        return False


def released(run_dir: Path) -> None:
    """The session's job is no longer in the queue (squeue knows nothing of it)."""
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    queued = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True)
    assert queued.stdout.strip() == "", f"job {job_id} is still queued: {queued.stdout}"


@pytest.fixture(scope="module")
def laptop(login_node, slurm_cluster, cpu_image, demo, tmp_path_factory):
    """The laptop's environment, ci-slurm reached over ssh (ct-login); the cluster's image store is this machine's
    own, so the image is found there and not copied."""
    config, base, _ = login_node
    tmp = tmp_path_factory.mktemp("shell-laptop")
    cluster = base / "shell-cluster"
    (tmp / "settings.yaml").write_text(json.dumps({"clusters": {"ci-slurm": {
        "ssh": "ct-login", "ssh_config": str(config), "remote_dir": str(cluster / "cluster-train"),
        "runs": str(cluster / "runs"), "images": str(ROOT / "images")}}}))
    env = {**os.environ, "CT_SETTINGS": str(tmp / "settings.yaml"), "CT_RUNS_DIR": str(tmp / "runs")}
    env.pop("CT_IMAGES", None)
    return dict(env=env, runs=cluster / "runs", demo=demo)


@pytest.mark.slow  # a real sshd and the Slurm cluster
def test_a_command_from_the_laptop_runs_in_the_image_on_a_node(laptop):
    done = run_cluster("shell", "ci-slurm", "n1_gpu1", *laptop["demo"], "--run-id", "shell-command", "--command",
                       'hostname; python -c "import torch; print(torch.__version__)"; exit 7', env=laptop["env"],
                       timeout=180)
    assert done.returncode == 7, done.stderr  # the command's own exit status
    host, version = done.stdout.split()[-2:]
    assert re.fullmatch(r"n[1-4]", host) and version.split("+")[0] == TORCH, done.stdout
    released(laptop["runs"] / "shell-command")
    # the allocation's cancel that followed is run-cluster's own release: the run ended as its command did
    status = run_cluster("status", laptop["runs"] / "shell-command").stdout
    assert " FAILED" in status.splitlines()[0] and "cause: the shell's command exited 7" in status, status
    assert "outside run-cluster" not in status, status


def read_until(fd: int, pattern: str, timeout_s: float, seen: bytearray) -> bool:
    """Read the pty into `seen` until `pattern` matches what was read, the pty closes or the time is up."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if re.search(pattern.encode(), seen):
            return True
        if select.select([fd], [], [], 0.5)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the session's end closed the pty
                return False
            if not chunk:
                return False
            seen += chunk
    return False


def on_a_pty(laptop: dict, run_id: str, talk) -> int:
    """`run-cluster shell` from the laptop on a pty, as from a person's terminal; `talk(fd, seen)` types into it.
    Its exit status once the session has ended."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: run-cluster on this pty
        os.execve(sys.executable, [sys.executable, str(ROOT / "bin" / "run-cluster"), "shell", "ci-slurm",
                                   "n1_gpu1", *laptop["demo"], "--run-id", run_id], laptop["env"])
    seen = bytearray()
    try:
        assert read_until(fd, r"the session starts on its first node", 120, seen), seen.decode(errors="replace")
        talk(fd, seen)
        read_until(fd, r"$^", 30, seen)  # to the end of the session
    finally:
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.slow  # a real sshd and the Slurm cluster
def test_an_interactive_shell_from_the_laptop_runs_hostname_on_the_node_and_exits(laptop):
    def hostname_then_exit(fd, seen):
        os.write(fd, b'echo "ON=$(hostname)"\n')
        assert read_until(fd, r"ON=n[1-4]\r?\n", 60, seen), seen.decode(errors="replace")
        os.write(fd, b"exit\n")

    assert on_a_pty(laptop, "shell-pty", hostname_then_exit) == 0
    released(laptop["runs"] / "shell-pty")


@pytest.mark.slow  # a real sshd and the Slurm cluster
def test_a_dropped_connection_releases_the_allocation(laptop, login_node):
    config, _, _ = login_node
    on_a_pty(laptop, "shell-drop", lambda fd, seen: close_shared(config, "ct-login"))
    deadline = time.time() + 30  # the login node's run-cluster, hung up, cancels the job
    while time.time() < deadline and not try_released(laptop["runs"] / "shell-drop"):
        time.sleep(1)
    released(laptop["runs"] / "shell-drop")


@pytest.mark.image  # the CPU image, checked against its digest before anything is queued
def test_a_command_on_the_lsf_stand_in(lsf_path, runs_dir, demo):
    done = run_cluster("shell", "ci-lsf", "one_gpu", *demo, "--command", "hostname; echo $CT_RUN_DIR; exit 3",
                       timeout=120)
    assert done.returncode == 3, done.stderr
    host, run_dir = done.stdout.split()[-2:]
    assert host == "n1" and Path(run_dir).parent == runs_dir, done.stdout
    ended = subprocess.run(["bjobs", "-a", "-noheader", "-o", "jobid stat exit_code"], capture_output=True, text=True)
    job_id = manifest(Path(run_dir))["scheduler"]["job_id"]
    assert ended.stdout.split() == [job_id, "EXIT", "3"]  # the session's job, recorded, ended with the command
    status = run_cluster("status", run_dir).stdout
    assert " FAILED" in status.splitlines()[0] and "cause: the shell's command exited 3" in status, status


@pytest.fixture
def held_cluster(tmp_path) -> Path:
    text = (ROOT / "clusters" / "ci-slurm.yaml").read_text().replace("name: ci-slurm", "name: ci-shell")
    path = tmp_path / "ci-shell.yaml"
    path.write_text(text.replace("profiles:\n", HELD, 1))
    return path


def refused(*args, env=None) -> str:
    """The one line a refused session says; nothing was written, so nothing was queued."""
    done = run_cluster("shell", *args, "--command", "true", env=env, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr


@pytest.mark.image  # the CPU image, checked against its digest before anything is queued
@pytest.mark.slurm
def test_bad_sessions_are_one_line_and_queue_nothing(slurm_cluster, held_cluster, runs_dir, tmp_path, demo):
    said = refused(str(held_cluster), "eight_gpus", *demo)
    assert "asks for 8 GPUs per node but a node has 4" in said, said
    said = refused("ci-slurm", "n1_gpu1", *demo, "--time", "00:30:00")
    assert "--time 00:30:00 is longer than the profile's time limit 00:20:00" in said, said
    from cluster_train.host.images import store

    sif = tmp_path / "cpu.sif"  # an image store whose cpu image was changed after it was recorded
    sif.write_text("stand-in image\n")
    record = store.record("cpu", sif, ROOT / "pyproject.toml", ROOT / "pyproject.toml", root=tmp_path / "images")
    Path(record.path).write_text("changed\n")
    said = refused("ci-slurm", "n1_gpu1", *demo, "--stale-image-ok",
                   env={**os.environ, "CT_IMAGES": str(tmp_path / "images")})
    assert f"was tampered with: its sha256 is no longer {record.sha256}" in said, said
    assert not list(runs_dir.iterdir())


@pytest.mark.image  # the CPU image, checked against its digest before anything is queued
@pytest.mark.slurm
def test_ctrl_c_while_pending_withdraws_the_request(slurm_cluster, held_cluster, runs_dir, demo):
    session = subprocess.Popen([sys.executable, str(ROOT / "bin" / "run-cluster"), "shell", str(held_cluster), "held",
                                *demo, "--command", "true"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    lines = []
    try:
        for line in session.stderr:
            lines.append(line)
            if "pending: BeginTime; expected start 20" in line:  # the --begin time, as Slurm's estimate
                break
        session.send_signal(signal.SIGINT)
        _, rest = session.communicate(timeout=60)
    finally:
        session.kill()
    assert session.returncode == 2 and "withdrawn; nothing is allocated" in rest, "".join(lines) + rest
    (run_dir,) = runs_dir.iterdir()
    released(run_dir)
    status = run_cluster("status", run_dir).stdout  # the withdrawal is run-cluster's own cancel
    assert "CANCELLED" in status.splitlines()[0] and "cause: cancelled by bin/run-cluster cancel at" in status, status
