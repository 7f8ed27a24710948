"""`bin/run-cluster doctor`: on this machine (the real Apptainer, the test Slurm cluster and its accounting, the built
CPU image) everything a job needs is there; each failure mode is made for doctor's process alone, never for the
machine: a PATH whose apptainer names another configuration and whose unshare fails, a run root on a tiny tmpfs of
its own, an account that is not root's, settings with keys nothing reads, a module system that is not here."""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cluster
from cluster_train.host.doctor.space import quota_table_left


def doctor(tmp_path: Path, settings: str = "", image=None, cluster: str = "ci-slurm", runs: Path = None, **env):
    """doctor CLUSTER with a settings file, an image store and a run root of the test's own; the store holds the
    built CPU image's record where `image` is given (nothing is copied)."""
    images = tmp_path / "images"
    images.mkdir(exist_ok=True)
    if image is not None:
        (images / "index.json").write_text(json.dumps([dataclasses.asdict(image)]))
    (tmp_path / "settings.yaml").write_text(settings)
    runs = runs or tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    return run_cluster("doctor", cluster, env={**os.environ, "CT_IMAGES": str(images), "CT_RUNS_DIR": str(runs),
                                               "CT_SETTINGS": str(tmp_path / "settings.yaml"), **env})


def line(done, subject: str) -> str:
    """The one line of the check about `subject` (what follows its state)."""
    found = [text for text in done.stdout.splitlines() if text.split(None, 1)[1:2] and
             text.split(None, 1)[1].startswith(subject)]
    assert len(found) == 1, done.stdout + done.stderr
    return found[0]


@pytest.mark.image
@pytest.mark.slurm
def test_this_machine_can_run_a_job_on_the_test_cluster(cpu_image, slurm_cluster, tmp_path):
    done = doctor(tmp_path, "clusters:\n  ci-slurm: {account: ci-lab}\n", image=cpu_image)
    assert done.returncode == 0, done.stdout + done.stderr
    *checks, verdict = done.stdout.splitlines()
    assert checks and all(check.startswith("ok ") for check in checks), done.stdout
    assert verdict == "doctor ci-slurm: a job can run from here (0 warning(s))"
    assert "runs `true`" in line(done, "apptainer exec: the cpu image")
    assert "user namespaces" in line(done, "containers:") and "unshare --user works" in line(done, "containers:")
    assert line(done, "modules:").endswith("no modules")
    assert line(done, "account:").endswith("ci-lab is root's") and "ci-regular allowed" in line(done, "QOS:")
    assert re.search(r"slurm-wlm \d+\.\d+", line(done, "scheduler:"))
    assert f"cpu sha256:{cpu_image.sha256[:12]}" in line(done, "images:") and "verified" in line(done, "images:")
    assert "wants 5.0 GB" in line(done, "run root") and "the cpu image's size" in line(done, "image store")


@pytest.mark.image
@pytest.mark.slurm
def test_the_node_check_runs_an_all_reduce_across_two_nodes(cpu_image, slurm_cluster, runs_dir):
    done = run_cluster("doctor", "ci-slurm", "--node", "n2_gpu1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert re.search(r"^ +0  n1 .*\n +1  n2 ", done.stdout, re.M), done.stdout[-3000:]  # a rank on each node
    assert re.search(r"all-reduce of 16 MiB over 2 rank\(s\) \(gloo\): [\d.]+ ms, [\d.]+ GB/s bus bandwidth",
                     done.stdout), done.stdout[-2000:]


@pytest.mark.slurm
def test_apptainer_without_setuid_or_user_namespaces_is_a_problem(slurm_cluster, tmp_path):
    """What doctor finds of Apptainer is taken away for doctor alone: first on its PATH, an apptainer that forwards
    to the real one but whose `buildcfg` names a configuration with `allow setuid = no` (beside a starter-suid that
    is setuid root, so the configuration is what says no), and an unshare that fails as a kernel without
    unprivileged user namespaces fails it."""
    real = shutil.which("apptainer")
    said = dict(row.split("=", 1) for row in subprocess.run([real, "buildcfg"], capture_output=True, text=True,
                                                            check=True).stdout.splitlines() if "=" in row)
    conf = tmp_path / "etc" / "apptainer" / "apptainer.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(re.sub(r"(?m)^allow setuid = yes$", "allow setuid = no",
                           Path(said["APPTAINER_CONF_FILE"]).read_text()))
    starter = tmp_path / "libexec" / "apptainer" / "bin" / "starter-suid"
    starter.parent.mkdir(parents=True)
    starter.touch(mode=0o644)
    starter.chmod(0o4644)  # setuid root (the test runs as root), and not executable: nothing can run it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text(
        f'#!/bin/sh\nif [ "$1" = buildcfg ]; then\n  {real} buildcfg | sed -e "s|^APPTAINER_CONF_FILE=.*|'
        f'APPTAINER_CONF_FILE={conf}|" -e "s|^SYSCONFDIR=.*|SYSCONFDIR={tmp_path / "etc"}|" '
        f'-e "s|^LIBEXECDIR=.*|LIBEXECDIR={tmp_path / "libexec"}|"\n  exit\nfi\nexec {real} "$@"\n')
    (bin_dir / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    for tool in ("apptainer", "unshare"):
        (bin_dir / tool).chmod(0o755)
    done = doctor(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert done.returncode == 1, done.stdout + done.stderr
    containers = line(done, "containers:")
    assert containers.startswith("problem ") and f"setuid: allow setuid = no in {conf}" in containers
    assert "user namespaces: none can be made (unshare --user: unshare: unshare failed" in containers
    assert "fix: ask the admins for unprivileged user namespaces" in containers and "allow setuid = yes" in containers
    assert line(done, "apptainer:").startswith("ok ")  # found, and its version said: only the ways to start it went


@pytest.mark.slurm
def test_a_controller_that_does_not_answer_is_a_problem(slurm_cluster, tmp_path):
    """The cluster's own configuration, its controller's port moved to one where nothing listens, for doctor alone:
    every command is still on PATH, and only asking slurmctld tells that no job can be queued."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(Path("/etc/slurm/slurm.conf").read_text() + "SlurmctldPort=1\n")
    started = time.monotonic()
    done = doctor(tmp_path, SLURM_CONF=str(conf))
    assert done.returncode == 1 and time.monotonic() - started < 60, done.stdout + done.stderr
    scheduler = line(done, "scheduler:")
    assert scheduler.startswith("problem ") and "slurmctld does not answer (scontrol ping: " in scheduler
    assert "fix: no job can be queued until it answers" in scheduler
    assert done.stdout.splitlines()[-1].startswith("doctor ci-slurm: ") and "a job can run from here" not in done.stdout


@pytest.mark.slurm
def test_a_full_run_root_is_a_problem(slurm_cluster, tmp_path):
    full = Path(f"/run/ct-doctor-full-{os.getpid()}")  # a file system of its own, 64 KiB, for this test alone
    full.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "ct-doctor-full", str(full)], check=True)
        try:
            done = doctor(tmp_path, runs=full)
        finally:
            subprocess.run(["umount", str(full)], check=True)
    finally:
        full.rmdir()
    assert done.returncode == 1, done.stdout + done.stderr
    runs = line(done, f"run root {full}:")
    assert runs.startswith("problem ") and "65.5 kB free, less than 5.0 GB (5 GB assumed" in runs
    assert "fix: free space there, or set runs: to a file system with room" in runs


@pytest.mark.slurm
def test_an_account_that_is_not_yours_and_a_missing_image_are_problems(slurm_cluster, tmp_path):
    done = doctor(tmp_path, "clusters:\n  ci-slurm: {account: no-such-account}\n")
    assert done.returncode == 1, done.stdout + done.stderr
    account = line(done, "account:")
    assert account.startswith("problem ") and "'no-such-account' (your settings for ci-slurm) is not one root may " \
                                              "use (yours: ci-lab, ci-other, root)" in account
    assert "fix: set account: to one of them in" in account
    image = line(done, "images:")
    assert image.startswith("problem ") and f"no cpu image in the store {tmp_path / 'images'}" in image
    assert f"fix: CT_IMAGES={tmp_path / 'images'} make image FLAVOR=cpu" in image and "images import cpu.sif" in image


@pytest.mark.image
@pytest.mark.slurm
def test_settings_keys_nothing_reads_warn_and_a_misspelt_key_is_a_problem(cpu_image, slurm_cluster, tmp_path):
    done = doctor(tmp_path, "colour: blue\nclusters:\n  ci-slurm: {account: ci-lab, scrach: /scratch/x}\n",
                  image=cpu_image)
    assert done.returncode == 0, done.stdout + done.stderr  # warnings do not fail
    settings = line(done, "settings ")
    assert settings.startswith("warning ") and "colour, clusters.ci-slurm.scrach read by nothing" in settings
    assert "fix: correct its spelling or remove it" in settings
    assert done.stdout.splitlines()[-1] == "doctor ci-slurm: a job can run from here (1 warning(s))"
    done = doctor(tmp_path, "clusters:\n  ci-slurm: {acount: ci-lab}\n")
    assert done.returncode == 1
    assert "unknown key 'acount' (did you mean 'account'?)" in line(done, "settings:")
    assert "account:" not in done.stdout  # no settings to check an account against


@pytest.mark.slurm
def test_modules_without_a_module_system_are_a_problem(slurm_cluster, tmp_path):
    """This machine has no module system: a cluster file that loads one names what to set."""
    cluster = tmp_path / "ci-slurm.yaml"
    cluster.write_text((ROOT / "clusters" / "ci-slurm.yaml").read_text() + "modules: [apptainer]\n")
    done = doctor(tmp_path, cluster=str(cluster))
    modules = line(done, "modules:")
    assert modules.startswith("problem ") and "a login shell here has no module command to load apptainer" in modules
    assert f"fix: name the module system's init script as module_init: in {cluster}" in modules
    assert line(done, "apptainer:").startswith("ok ")  # found on this shell's PATH all the same


def test_quota_tables_give_what_is_left_under_the_tighter_limit():
    lfs = ("Disk quotas for usr alice (uid 1000):\n     Filesystem  kbytes   quota   limit   grace   files   quota   "
           "limit   grace\n       /scratch  900000*  800000 1000000   6d23h    1200       0       0       -\n")
    assert quota_table_left(lfs) == 0  # over the soft limit: nothing left
    wrapped = ("Disk quotas for user bob (uid 1001): \n     Filesystem  blocks   quota   limit   grace   files   quota"
               "   limit   grace\nnfs.example.org:/export/home\n                 100000  4000000 5000000            "
               "10       0       0        \n")
    assert quota_table_left(wrapped) == (4000000 - 100000) * 1024
    assert quota_table_left(lfs.replace("800000 1000000", "0 0")) is None  # no limit set
    assert quota_table_left("Disk quotas for user carol (uid 1002): none\n") is None
