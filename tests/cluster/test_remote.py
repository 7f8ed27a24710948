"""A cluster reached over SSH (cluster_train/host/remote): a real OpenSSH server on 127.0.0.1 plays the test Slurm
cluster's login node (tests/ssh/login.py), this checkout plays the laptop and a directory of the server's plays the
project's copy on the cluster. Values reach the remote shell as data; ssh's failures are one line naming the host and
the fix; a run submitted from the laptop trains on the test Slurm cluster and every run command reaches it."""
import json
import os
import re
import shutil
import dataclasses
import hashlib
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT, job_logs, run_cluster, wait_for_slurm_job

from cluster_train.shared.errors import UserError
from cluster_train.host import git
from cluster_train.host.remote import ssh, sync
from cluster_train.host.images import store
from cluster_train.host.reach import Reach

sys.path.insert(0, str(ROOT / "tests" / "ssh"))
import login  # noqa: E402  (tests/ssh/login.py: the test's OpenSSH server)

NASTY = ["$(touch PWNED)", "a;touch PWNED", "line\nbreak", "'quoted' \"double\"", "`touch PWNED`", "~/x", "*", ""]


def test_every_word_reaches_the_remote_shell_as_data(tmp_path):
    """What sshd hands the login shell is the line remote_line builds: run it through sh as sshd would."""
    echo = ["sh", "-c", 'printf "%s|" "$@"; printf "%s" "$CT_X"', "sh", *NASTY]
    line = ssh.remote_line(echo, cwd=str(tmp_path), env={"CT_X": "$(touch PWNED)"})
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True)
    words = [*NASTY[:5], os.environ["HOME"] + "/x", *NASTY[6:]]  # a path under ~ is the remote user's home
    assert done.stdout == "".join(f"{w}|" for w in words) + "$(touch PWNED)"
    assert not list(tmp_path.iterdir()), "a value ran as code"


def test_a_full_disk_is_named_as_the_cause_not_the_broken_pipe_it_leaves():
    """rsync's words when the receiver's disk fills (recorded from rsync 3.2.7): the sender's broken pipe follows."""
    said = ssh.failure_line(Reach("ci-slurm", "ct-other", "/tmp/x"), (
        'rsync: [receiver] write failed on "/x/clusters/ci-lsf.yaml": No space left on device (28)\n'
        "rsync error: error in file IO (code 11) at receiver.c(401) [receiver=3.2.7]\n"
        "rsync: [sender] write error: Broken pipe (32)\n"))
    assert "quota there is full (No space left on device)" in said and "dropped" not in said


def failure(reach: Reach) -> str:
    with pytest.raises(UserError) as err:
        ssh.run(reach, ["true"], capture=True)
    assert len(err.value.lines) == 1
    return str(err.value)


@pytest.mark.slow  # a real sshd
def test_ssh_failures_are_one_line_naming_the_host_and_the_fix(login_node, tmp_path):
    config, base, ports = login_node
    changed = tmp_path / "ssh_config"  # the same server, a known_hosts that holds another key for it
    stranger = (base / "id_stranger.pub").read_text().split()
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{ports['ct-other']} {stranger[0]} {stranger[1]}\n")
    changed.write_text(config.read_text().replace(str(base / "known_hosts"), str(tmp_path / "known_hosts"))
                       .replace("Host ct-other", "Host ct-changed"))
    said = failure(Reach("ci-slurm", "ct-changed", "/tmp/x", config=str(changed)))
    assert "ct-changed" in said and "host key" in said  # the alias's own address, port and known_hosts:
    assert f"ssh-keygen -R '[127.0.0.1]:{ports['ct-other']}' -f {tmp_path / 'known_hosts'}" in said, said
    refused = tmp_path / "refused_config"
    refused.write_text(config.read_text().replace(str(base / "id_user"), str(base / "id_stranger"))
                       .replace("Host ct-other", "Host ct-refused"))
    said = failure(Reach("ci-slurm", "ct-refused", "/tmp/x", config=str(refused)))
    assert "ct-refused" in said and "refused your key" in said and "ssh-add" in said
    said = failure(Reach("ci-slurm", "ct-other", "/tmp/x", config=str(config), port=login.free_port()))
    assert "ct-other" in said and "cannot be reached" in said and "Connection refused" in said
    other = Reach("ci-slurm", "ct-other", "/tmp/x", config=str(config))  # first connected here: no shared one before
    assert ssh.run(other, ["echo", "reached"], capture=True).stdout == "reached\n"
    down = Reach("ci-slurm", "ct-login", "/tmp/x", config=str(config), jump=f"127.0.0.1:{login.free_port()}")
    assert "cannot be reached" in failure(down)  # the jump host is on the way: one that is down ends it
    jumped = Reach("ci-slurm", "ct-login", "/tmp/x", config=str(config), jump="ct-other")  # through a bastion
    assert ssh.run(jumped, ["echo", "jumped"], capture=True).stdout == "jumped\n"


@pytest.mark.slow  # a real sshd, a whole project sent
def test_a_full_remote_disk_or_a_missing_python_queue_nothing(login_node, tmp_path):
    config, base, _ = login_node
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)], check=True)
    try:
        said = submit_to(config, tmp_path, remote_dir=str(full / "cluster-train"))
    finally:
        subprocess.run(["umount", str(full)], check=True)
    assert (said.returncode == 2 and "ci-slurm over ssh (ct-other)" in said.stderr
            and "quota there is full" in said.stderr)
    said = submit_to(config, tmp_path, remote_dir=str(tmp_path / "copy"), remote_python="python9")
    assert said.returncode == 2 and "ci-slurm over ssh (ct-other) has no python9" in said.stderr, said.stderr
    assert len(said.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()  # no record: not queued


@pytest.mark.slow  # a real sshd
def test_a_cluster_that_cannot_be_reached_is_one_row_of_a_terminal_s_width(login_node):
    from cluster_train.host.views import table

    config, _, _ = login_node
    down = Reach("gilbreth", "ct-other", "/tmp/x", port=login.free_port(), config=str(config))
    (row,) = table.ask(down, {}, batch=True)
    assert row["state"] == "UNREACHABLE" and "cannot be reached" in row["last"] and "Connection refused" in row["last"]
    assert max(len(line) for line in table.table([row]).splitlines()) <= 120, table.table([row])


@pytest.mark.slow  # a real sshd, a whole project sent
def test_doctor_checks_the_login_node_it_reaches_over_ssh(login_node, tmp_path):
    """The login node's sessions have the LSF stand-in's commands on PATH, this machine has none of them: doctor
    ci-lsf finds them there, as a job submitted over ssh would."""
    config, base, _ = login_node
    assert shutil.which("bsub") is None  # here: not on this machine's PATH
    settings = tmp_path / "settings.yaml"
    settings.write_text(json.dumps({"clusters": {"ci-lsf": {"ssh": "ct-other", "ssh_config": str(config),
                                                            "remote_dir": str(base / "doctor" / "cluster-train")}}}))
    done = run_cluster("doctor", "ci-lsf", env={**os.environ, "CT_SETTINGS": str(settings),
                                                "CT_RUNS_DIR": str(tmp_path / "runs")})
    assert done.stdout.startswith("doctor ci-lsf: checked on ci-lsf over ssh (ct-other)"), done.stdout + done.stderr
    scheduler = [row for row in done.stdout.splitlines() if " scheduler: " in row]
    assert len(scheduler) == 1 and "bsub, bjobs, bkill, bhist here" in scheduler[0], done.stdout
    assert not scheduler[0].startswith("problem"), scheduler  # its mbatchd answers: the stand-in's bqueues -l
    assert f"run root {base / 'doctor' / 'cluster-train' / 'runs'}" in done.stdout  # the login node's own


def close_shared(config, host: str) -> None:
    """The shared connection to host ends, and every command running over it: the connection drops."""
    subprocess.run(["ssh", "-F", str(config), "-o", f"ControlPath={ssh.control_dir()}/%C", "-O", "exit", host],
                   capture_output=True)


def drop_once_arriving(incoming, config, at_least: int) -> None:
    """Drop the connection once the image's copy on the cluster holds at_least bytes (and has not all arrived)."""
    deadline = time.time() + 120
    while not (incoming.is_file() and incoming.stat().st_size >= at_least) and time.time() < deadline:
        time.sleep(0.01)
    close_shared(config, "ct-other")


@pytest.mark.image
@pytest.mark.slow  # a real sshd, the CPU image sent over it
def test_a_connection_dropped_mid_image_transfer_and_a_retry_end_with_one_verified_image(login_node, cpu_image):
    config, base, _ = login_node
    remote = base / "transfer"
    reach = Reach("ci-slurm", "ct-other", str(remote / "cluster-train"), config=str(config))
    sync.send_code(reach)
    sync.send_settings(reach, {"images": str(remote / "images")})
    incoming = remote / "cluster-train" / ".incoming" / f"{cpu_image.sha256}.sif"
    dropper = threading.Thread(target=drop_once_arriving, args=(incoming, config, 64 * 2**20))
    dropper.start()
    with pytest.raises(UserError) as err:
        sync.send_image(reach, cpu_image)
    dropper.join()
    assert "ci-slurm over ssh (ct-other)" in str(err.value) and "nothing was queued" in str(err.value), err.value
    arrived = incoming.stat().st_size
    assert 64 * 2**20 <= arrived < cpu_image.size and not (remote / "images").exists()  # nothing entered the store
    sent = sync.send_image(reach, cpu_image)  # the retry sends what had not arrived
    assert sent < cpu_image.size - arrived // 2, (sent, arrived, cpu_image.size)
    stored = store.records(remote / "images")
    assert [r.sha256 for r in stored] == [cpu_image.sha256] and not incoming.exists()
    with open(stored[0].path, "rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == cpu_image.sha256  # one verified image
    assert sync.send_image(reach, cpu_image) == 0  # the cluster's store has it now


@pytest.mark.registry
@pytest.mark.slow  # a real sshd and a real OCI registry
def test_the_cluster_pulls_an_image_pushed_to_a_registry_and_nothing_passes_through_the_laptop(
        login_node, oci_registry, tmp_path, monkeypatch, capsys):
    from host.test_image_commands import build_sif, images_command

    config, base, _ = login_node
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "store"))  # the laptop's store: one small image, pushed once
    (tmp_path / "settings.yaml").write_text("{}\n")
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    images_command("import", build_sif(tmp_path / "cpu.sif"))
    assert images_command("push", "cpu", f"oras://{oci_registry}/lab/remote", "--plain-http").returncode == 0
    image = store.records(tmp_path / "store")[0]
    remote = base / "pulled"
    reach = Reach("ci-slurm", "ct-other", str(remote / "cluster-train"), config=str(config))
    sync.send_code(reach)
    for cluster_store, pushed in ((remote / "by-registry", image.pushed),
                                  (remote / "by-copy",
                                   [{"reference": "oras://127.0.0.1:9/lab/gone", "plain_http": True}])):
        sync.send_settings(reach, {"images": str(cluster_store)})
        sent = sync.send_image(reach, dataclasses.replace(image, pushed=pushed))
        assert (sent == 0) == (pushed is image.pushed), sent  # pulled there, or (the registry gone) sent from here
        said = capsys.readouterr().err
        assert ("oras://127.0.0.1:9/lab/gone" in said and "sending the image from here instead" in said) == (sent > 0)
        assert [r.sha256 for r in store.records(cluster_store)] == [image.sha256]


def submit_to(config, tmp_path, **reach) -> subprocess.CompletedProcess:
    settings = tmp_path / "settings.yaml"
    settings.write_text(json.dumps({"clusters": {"ci-slurm": {"ssh": "ct-other", "ssh_config": str(config), **reach}}}))
    env = {**os.environ, "CT_SETTINGS": str(settings), "CT_RUNS_DIR": str(tmp_path / "runs")}
    return run_cluster("ci-slurm", "n1_gpu1", "demo", "--no-wait", env=env)


# ---- from the laptop to the test Slurm cluster over SSH -------------------------------------------------------------

def demo(demo_data, epochs: int, *more: str) -> list:
    return ["ci-slurm", "n1_gpu1", "demo", "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
            "--set", f"trainer.max_epochs={epochs}", "--set", "trainer.limit_train_batches=4",
            "--set", "trainer.limit_val_batches=2", *more, "--no-wait"]


@pytest.fixture(scope="module")
def laptop(login_node, cpu_image, slurm_cluster, demo_data, tmp_path_factory):
    """The laptop's settings (ci-slurm reached over ssh at ct-login) and environment; one short run and one long run
    submitted from it. The cluster side's runs and project copy live under the sshd's directory."""
    config, base, _ = login_node
    tmp = tmp_path_factory.mktemp("laptop")
    cluster = base / "cluster"
    (tmp / "settings.yaml").write_text(json.dumps({"clusters": {"ci-slurm": {
        "ssh": "ct-login", "ssh_config": str(config), "remote_dir": str(cluster / "cluster-train"),
        "runs": str(cluster / "runs"), "images": str(cluster / "images")}}}))
    env = {**os.environ, "CT_SETTINGS": str(tmp / "settings.yaml"), "CT_RUNS_DIR": str(tmp / "runs")}
    env.pop("CT_IMAGES", None)
    submitted = {kind: run_cluster(*demo(demo_data, epochs), "--run-id", kind, env=env)
                 for kind, epochs in (("short", 1), ("long", 2000))}
    yield dict(env=env, cluster=cluster, local=tmp / "runs", submitted=submitted, demo_data=demo_data, config=config)
    for run in (cluster / "runs").glob("*/manifest.json"):
        if json.loads(run.read_text())["scheduler"]["name"] == "slurm":
            subprocess.run(["scancel", json.loads(run.read_text())["scheduler"]["job_id"]], capture_output=True)


def remote_manifest(laptop, run_id: str) -> dict:
    return json.loads((laptop["cluster"] / "runs" / run_id / "manifest.json").read_text())


@pytest.mark.image
@pytest.mark.slurm
def test_a_run_submitted_from_the_laptop_trains_and_every_run_command_reaches_it(laptop):
    env, short = laptop["env"], laptop["submitted"]["short"]
    assert short.returncode == 0, short.stdout[-3000:] + short.stderr
    files, image_bytes = re.search(r"code sent, (\d+) changed files, \d+ bytes; image sent, (\d+) bytes",
                                   short.stdout).groups()
    assert int(files) > 100 and int(image_bytes) > 10 * 2**20  # the whole project and the image, the first time
    assert re.search(r"^sending [0-9a-f]{12}\.sif to ci-slurm: ([\d.]+) MB of \1 MB \(100 %\), [\d.]+ MB/s",
                     short.stderr, re.M), short.stderr  # the image's progress, piped: plain lines, the last one
    record = json.loads((laptop["local"] / "short" / "remote.json").read_text())
    assert (record["cluster"], record["ssh"]) == ("ci-slurm", "ct-login")
    sent_from = dict(zip(("commit", "dirty"), git.git_state(ROOT)))  # the copy there has no .git: the laptop's
    assert sent_from["commit"] and remote_manifest(laptop, "short")["git"] == sent_from
    job = remote_manifest(laptop, "short")["scheduler"]["job_id"]
    assert remote_manifest(laptop, "short")["command"].count("--run-id") == 1  # typed once: recorded once
    assert wait_for_slurm_job(job, 300) == "COMPLETED", job_logs(laptop["cluster"] / "runs" / "short")[-3000:]
    status = run_cluster("status", "short", env=env)
    assert (status.returncode == 0
            and f"short: slurm job {job} COMPLETED" in status.stdout), status.stdout + status.stderr
    logs = run_cluster("logs", str(laptop["local"] / "short"), env=env)
    assert "[cluster-train] rank 0/1 on host" in logs.stdout
    again = run_cluster("--rerun", "short", env=env)  # same digest and config, a new run on the cluster
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    rerun_id = next(p.name for p in laptop["local"].iterdir() if p.name not in ("short", "long"))
    rerun = remote_manifest(laptop, rerun_id)
    assert (rerun["rerun_of"] == "short"
            and rerun["image"]["sha256"] == remote_manifest(laptop, "short")["image"]["sha256"])
    assert rerun["git"] == sent_from
    followed = run_cluster("logs", "--follow", rerun_id, env=env, timeout=300)  # streamed until the job ends
    assert followed.returncode == 0 and "[cluster-train] rank 0/1 on host" in followed.stdout, followed.stderr
    results = [json.loads((laptop["cluster"] / "runs" / r / "results.json").read_text()) for r in ("short", rerun_id)]
    assert results[0]["final_val_loss"] == results[1]["final_val_loss"]  # the same digest and config: the same run
    report = run_cluster("report", "short", env=env, timeout=120)  # results, metrics, logs fetched; no checkpoints
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr
    fetched = laptop["local"] / "short"
    assert (fetched / "report.html").is_file() and (fetched / "metrics.csv").is_file()
    assert not (fetched / "checkpoints").exists()
    got = run_cluster("fetch", "short", "--checkpoints", env=env, timeout=120)  # asked for: the checkpoints too
    assert got.returncode == 0 and list((fetched / "checkpoints").glob("*.ckpt")), got.stdout + got.stderr
    assert not (fetched / "code").exists()
    here = run_cluster("fetch", rerun_id + "-none", env=env)
    assert here.returncode == 2 and "holds no remote.json" in here.stderr, here.stderr


@pytest.mark.image
@pytest.mark.slurm
def test_a_script_on_the_laptop_reads_a_run_on_the_cluster_as_a_local_one(laptop, monkeypatch):
    """The Python API (cluster_train/host/api/run.py) from the laptop: the run that lives on the cluster over SSH waited
    for, its status, results, metrics and logs read, listed by runs(); each asked there as the command line asks."""
    from cluster_train.host.api.run import Run, State, runs

    for name in ("CT_SETTINGS", "CT_RUNS_DIR"):
        monkeypatch.setenv(name, laptop["env"][name])
    monkeypatch.delenv("CT_IMAGES", raising=False)
    run = Run("short")
    status = run.wait(timeout=300)
    there = laptop["cluster"] / "runs" / "short"
    assert (status.state, status.scheduler) == (State.COMPLETED, "slurm"), job_logs(there)[-3000:]
    assert status.job_id == remote_manifest(laptop, "short")["scheduler"]["job_id"] and status.segments
    assert run.results() == json.loads((there / "results.json").read_text())
    assert any("val/loss" in row for row in run.metrics()) and "[cluster-train] rank 0/1 on host" in run.logs()
    assert run.cancel().endswith("(short) has ended: COMPLETED; nothing to cancel")
    assert run in runs(cluster="ci-slurm", state=State.COMPLETED)


@pytest.mark.image
@pytest.mark.slurm
def test_a_second_submission_sends_no_code_and_cancel_reaches_the_cluster(laptop):
    env, long = laptop["env"], laptop["submitted"]["long"]
    assert long.returncode == 0, long.stdout[-3000:] + long.stderr
    records = sorted(p.name for p in laptop["local"].iterdir())
    canary = laptop["cluster"] / "PWNED"
    hostile = f"/nonexistent/$(touch {canary});touch {canary}"
    refused = run_cluster(*demo(hostile, 1), env=env)  # a check only the cluster can make, on a hostile value
    assert refused.returncode == 2 and "run-cluster: error: ci-slurm over ssh (ct-login): " in refused.stderr
    assert hostile in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    named = run_cluster(*demo(laptop["demo_data"], 1), "--run-id", f"x;touch {canary}", env=env)
    assert named.returncode == 2 and "run id" in named.stderr, named.stderr  # refused before anything is sent
    assert not canary.exists()  # the value reached the cluster as data
    dry = run_cluster(*demo(laptop["demo_data"], 1, "--dry-run", "--sweep", "optim.lr=0.05,0.1"), env=env)
    assert dry.returncode == 0, dry.stderr
    assert "2 runs" in dry.stdout or dry.stdout.count("optim.lr=") >= 2, dry.stdout[-2000:]  # a sweep, built there
    assert "code sent, 0 changed files" in dry.stdout  # unchanged files are not sent again
    assert "image sent, 0 bytes" in long.stdout  # the cluster's store has it since the first submission
    assert sorted(p.name for p in laptop["local"].iterdir()) == records  # a dry run leaves no record
    data_here = {**env, "CT_IMAGES": str(laptop["local"].parent / "images")}  # the laptop's data store: no image
    assert run_cluster("data", "pack", laptop["demo_data"], "--name", "demo", env=data_here).returncode == 0
    with_data = run_cluster(*demo("/data/demo", 1, "--dry-run", "--set", "data.image=demo"), env=data_here)
    assert with_data.returncode == 0 and "--no-mount cwd" in with_data.stdout, with_data.stderr  # bound there
    sent = int(re.search(r"data image sent, (\d+) bytes", with_data.stdout).group(1))
    again = run_cluster(*demo("/data/demo", 1, "--dry-run", "--set", "data.image=demo"), env=data_here)
    assert sent > 0 and "data image sent, 0 bytes" in again.stdout, again.stdout[-2000:]  # the cluster has it now
    damaged_here(laptop, data_here)
    follow = subprocess.Popen([str(ROOT / "bin" / "run-cluster"), "logs", "--follow", "long"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(3)
    close_shared(laptop["config"], "ct-login")  # the connection drops mid --follow
    _, dropped = follow.communicate(timeout=60)
    assert follow.returncode == 2 and "ci-slurm over ssh (ct-login): it cannot be reached or the connection dropped" \
        in dropped and len(dropped.strip().splitlines()) == 1, dropped
    cancelled = run_cluster("cancel", "long", env=env)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    job = remote_manifest(laptop, "long")["scheduler"]["job_id"]
    assert wait_for_slurm_job(job, 120) == "CANCELLED"
    assert "CANCELLED" in run_cluster("status", "long", env=env).stdout
    resumed = run_cluster("resume", "long", "--no-wait", env=env)  # a new segment of the same run, queued there
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr
    again = remote_manifest(laptop, "long")["scheduler"]["job_id"]
    assert again != job and run_cluster("cancel", "long", env=env).returncode == 0
    assert wait_for_slurm_job(again, 120) == "CANCELLED"


def damaged_here(laptop, data_here) -> None:
    """The laptop's own copy of a data image, modified after packing: refused before it is sent, naming the source's
    fix (restore it or pack again), not the cluster's digest check's "copy it again"."""
    small = laptop["local"].parent / "small"
    small.mkdir()
    (small / "x.txt").write_text("x\n")
    assert run_cluster("data", "pack", small, "--name", "small", env=data_here).returncode == 0
    data = laptop["local"].parent / "images" / "data"
    stored = data / next(e["path"] for e in json.loads((data / "index.json").read_text()) if e["name"] == "small")
    with open(stored, "r+b") as f:  # a byte of the file's data, past the superblock
        f.seek(100)
        f.write(bytes([f.read(1)[0] ^ 0xFF]))
    refused = run_cluster(*demo("/data/small", 1, "--dry-run", "--set", "data.image=small"), env=data_here)
    assert refused.returncode == 2 and "the data image small here" in refused.stderr, refused.stderr
    assert "pack the data again" in refused.stderr and "copy it again" not in refused.stderr, refused.stderr


@pytest.mark.image
@pytest.mark.slurm
def test_one_table_shows_local_runs_and_every_cluster_over_ssh(laptop, login_node, tmp_path):
    """local (this machine), ci-slurm and ci-lsf (the stand-in) over ssh, and a cluster whose login node is down."""
    config, _, _ = login_node
    env, cluster = dict(laptop["env"]), laptop["cluster"]
    reach = {"ssh": "ct-login", "ssh_config": str(config), "remote_dir": str(cluster / "cluster-train"),
             "runs": str(cluster / "runs"), "images": str(cluster / "images")}
    down = {**reach, "ssh": "ct-other", "ssh_port": login.free_port()}
    settings = tmp_path / "settings.yaml"
    settings.write_text(json.dumps({"clusters": {"ci-slurm": reach, "ci-lsf": reach, "gilbreth": down}}))
    env["CT_SETTINGS"] = str(settings)
    small = ["demo", "--set", f"data.root={laptop['demo_data']}", "--set", "data.num_workers=0",
             "--set", "trainer.max_epochs=1", "--set", "trainer.limit_train_batches=2", "--set",
             "trainer.limit_val_batches=1"]
    lsf = run_cluster("ci-lsf", "one_gpu", *small, "--run-id", "on-lsf", "--no-wait", env=env)
    assert lsf.returncode == 0, lsf.stdout[-2000:] + lsf.stderr
    here = run_cluster("local", "cpu_1proc", *small, "--run-id", "here", env=env)
    assert here.returncode == 0, here.stdout[-2000:] + here.stderr
    shown = run_cluster("runs", env=env)
    assert shown.returncode == 0, shown.stderr
    rows = {tuple(line.split()[:2]): line for line in shown.stdout.splitlines()[1:]}
    assert {("local", "here"), ("ci-slurm", "short"), ("ci-slurm", "long"), ("ci-lsf", "on-lsf"),
            ("gilbreth", "-")} <= set(rows), shown.stdout
    assert "COMPLETED" in rows[("local", "here")] and "1/1" in rows[("local", "here")]
    assert "UNREACHABLE" in rows[("gilbreth", "-")] and "cannot be reached" in rows[("gilbreth", "-")]
    only = run_cluster("runs", "--cluster", "ci-lsf", env=env).stdout.splitlines()[1:]
    assert [line.split()[:2] for line in only] == [["ci-lsf", "on-lsf"]]


@pytest.mark.image
@pytest.mark.slurm
def test_the_api_reaches_a_cluster_over_ssh_as_its_login_node(laptop, monkeypatch, capsys):
    """ci-slurm over SSH through the API, in this process: its dry run is the login node's script, a value refused
    there is its one line naming where, and submit() queues there and returns the Run of the record here; nothing
    is printed."""
    import cluster_train as ct

    for name in ("CT_SETTINGS", "CT_RUNS_DIR"):
        monkeypatch.setenv(name, laptop["env"][name])
    monkeypatch.delenv("CT_IMAGES", raising=False)
    small = {"data.root": str(laptop["demo_data"]), "data.num_workers": 0, "trainer.max_epochs": 1,
             "trainer.limit_train_batches": 2, "trainer.limit_val_batches": 1}
    job = ct.Job("ci-slurm", "n1_gpu1", "demo", overrides=small, run_id="api")
    shown = job.dry_run()
    assert shown.summary.startswith("cluster ci-slurm") and shown.config["trainer"]["max_epochs"] == 1
    assert shown.script.startswith("#!/bin/bash") and str(laptop["cluster"] / "runs" / "api") in shown.script
    bad = ct.Job("ci-slurm", "n1_gpu1", "demo", overrides={**small, "data.root": "/nonexistent-api"}, run_id="bad")
    with pytest.raises(ct.ClusterTrainError) as refused:
        bad.submit()
    assert str(refused.value).startswith("ci-slurm over ssh (ct-login): ") and "/nonexistent-api" in str(refused.value)
    assert not (laptop["local"] / "bad").exists() and not (laptop["cluster"] / "runs" / "bad").exists()
    run = job.submit()
    assert run.path == laptop["local"] / "api" and json.loads((run.path / "remote.json").read_text())["run_id"] == "api"
    assert (laptop["cluster"] / "runs" / "api" / "manifest.json").is_file()
    assert capsys.readouterr() == ("", "")
