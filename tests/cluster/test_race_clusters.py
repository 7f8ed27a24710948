"""First-to-start across clusters (`run-cluster --first-to-start CLUSTER:PROFILE CLUSTER:PROFILE ...`): ci-slurm and
ci-lsf, both reached over SSH from this checkout playing the laptop. A real OpenSSH server on 127.0.0.1 plays both
login nodes (tests/ssh/login.py; its sessions have the LSF stand-in's commands on PATH, and the test Slurm cluster runs
on this machine). Slurm's side is held back an hour (ci-slurm's n1_gpu1_later: --begin=now+1hour), so LSF's starts
first, every time."""
import json
import os
import subprocess
import time

import pytest
from conftest import job_logs, run_cluster, wait_for_slurm_job

SMALL = ["demo", "--set", "data.num_workers=0", "--set", "trainer.max_epochs=1", "--set",
         "trainer.limit_train_batches=2", "--set", "trainer.limit_val_batches=1"]


@pytest.fixture
def laptop_of_two(login_node, tmp_path):
    """The laptop's environment: ci-slurm and ci-lsf both over ssh to the one login node, their runs and images
    there; this machine's runs (the records of runs over SSH) under tmp_path. Every Slurm job left is cancelled."""
    config, base, _ = login_node  # tests/cluster/conftest.py
    cluster = base / "cluster"
    reach = {"ssh": "ct-login", "ssh_config": str(config), "remote_dir": str(cluster / "cluster-train"),
             "runs": str(cluster / "runs"), "images": str(cluster / "images")}
    (tmp_path / "settings.yaml").write_text(json.dumps({"clusters": {"ci-slurm": reach, "ci-lsf": reach}}))
    env = {**os.environ, "CT_SETTINGS": str(tmp_path / "settings.yaml"), "CT_RUNS_DIR": str(tmp_path / "runs")}
    env.pop("CT_IMAGES", None)
    yield dict(env=env, cluster=cluster, local=tmp_path / "runs")
    for manifest in (cluster / "runs").glob("*/manifest.json"):
        said = json.loads(manifest.read_text())
        if said["scheduler"]["name"] == "slurm":
            subprocess.run(["scancel", said["scheduler"]["job_id"]], capture_output=True)


def there(laptop_of_two, run_id: str) -> dict:
    return json.loads((laptop_of_two["cluster"] / "runs" / run_id / "manifest.json").read_text())


def wait_for_status(laptop_of_two, run_id: str, word: str, timeout_s: float) -> str:
    """`status RUN` from the laptop (over SSH) until it says `word`; its last answer."""
    deadline = time.time() + timeout_s
    while True:
        said = run_cluster("status", run_id, env=laptop_of_two["env"])
        if word in said.stdout or time.time() > deadline:
            return said.stdout + said.stderr
        time.sleep(3)


@pytest.mark.image
@pytest.mark.slurm
@pytest.mark.slow  # a real sshd, both clusters' jobs
def test_first_to_start_across_slurm_and_lsf_over_ssh_keeps_the_first_and_cancels_the_other(
        laptop_of_two, cpu_image, slurm_cluster, demo_data):
    env, small = laptop_of_two["env"], [*SMALL, "--set", f"data.root={demo_data}"]
    local, cluster = laptop_of_two["local"], laptop_of_two["cluster"]  # the records here, the runs there
    refused = run_cluster("--first-to-start", "ci-slurm:n1_gpu1", "ci-lsf:no_such", *small, env=env)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "--first-to-start ci-lsf:no_such: unknown profile" in refused.stderr, refused.stderr
    assert not local.exists() and not (cluster / "runs").exists()  # nothing queued anywhere
    dry = run_cluster("ci-lsf", "--first-to-start", "one_gpu", "single_host_2gpu", *small, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr  # the one-cluster form over SSH: the same race, each run checked there
    assert "profile one_gpu" in dry.stdout and "profile single_host_2gpu" in dry.stdout, dry.stdout[-2000:]
    assert not local.exists() and not (cluster / "runs").exists()

    done = run_cluster("--first-to-start", "ci-slurm:n1_gpu1_later", "ci-lsf:one_gpu", *small, "--timeout", "120",
                       env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "ci-lsf:one_gpu started first on ci-lsf" in done.stdout and "cancelled ci-slurm:n1_gpu1_later" \
        in done.stdout, done.stdout[-2000:]
    records = {json.loads((d / "remote.json").read_text())["cluster"]: d for d in local.iterdir()}
    assert set(records) == {"ci-slurm", "ci-lsf"}
    lsf, slurm = (there(laptop_of_two, records[c].name) for c in ("ci-lsf", "ci-slurm"))
    assert lsf["first_to_start"]["won"] and not slurm["first_to_start"]["won"]
    for manifest in (lsf, slurm):
        race = manifest["first_to_start"]
        assert (race["winner_cluster"], race["winner_run"]) == ("ci-lsf", records["ci-lsf"].name)
        waits = {r["cluster"]: r["wait_s"] for r in race["runs"]}
        assert set(waits) == {"ci-slurm", "ci-lsf"} and all(0 <= w < 120 for w in waits.values()), race
    laptop_record = json.loads((records["ci-slurm"] / "remote.json").read_text())
    assert laptop_record["first_to_start"] == slurm["first_to_start"]  # the laptop's record says it too
    assert wait_for_slurm_job(slurm["scheduler"]["job_id"], 60) == "CANCELLED"  # the cancel reached Slurm over SSH
    said = wait_for_status(laptop_of_two, records["ci-lsf"].name, "COMPLETED", 300)
    assert "COMPLETED" in said, said + job_logs(cluster / "runs" / records["ci-lsf"].name)[-3000:]
    shown = run_cluster("runs", env=env)
    rows = {tuple(line.split()[:2]): line for line in shown.stdout.splitlines()[1:]}
    assert ("ci-lsf", records["ci-lsf"].name) in rows and ("ci-slurm", records["ci-slurm"].name) in rows, shown.stdout
    assert "COMPLETED" in rows[("ci-lsf", records["ci-lsf"].name)]
    assert "CANCELLED" in rows[("ci-slurm", records["ci-slurm"].name)], shown.stdout
