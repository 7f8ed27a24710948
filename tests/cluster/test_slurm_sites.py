"""The site patterns of clusters/perlmutter.yaml and narval.yaml on the real test Slurm cluster, whose accounting has
a QOS and two accounts, whose nodes carry features (n1, n2: hbm80g) and whose GPUs have a GRES type (ctgpu):
each profile submits and runs, Slurm places it as asked, and Slurm's own parser accepts every ci-slurm script."""
import json
import os
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, job_logs, manifest, run_cluster, wait_for_slurm_job

pytestmark = pytest.mark.slurm
SMALL = ["--set", "trainer.max_epochs=1", "--set", "data.num_workers=0"]
FAKE_MODULES = 'module() { echo "[fake-module] $1 $2"; }\n'  # a module system as a site's init script makes one


def slurm_job(job_id: str) -> dict:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def placed_as_asked(profile: str, job: dict) -> None:
    """What Slurm recorded for each profile: the placement its keys asked for."""
    checks = {
        "default_partition": lambda: job["Partition"] == "ci",  # the script named none
        "qos": lambda: job["QOS"] == "ci-regular",
        "gpu_memory": lambda: job["Features"] == "gpu&hbm80g" and job["NodeList"] in ("n1", "n2"),
        "typed_gpus": lambda: "gpu:ctgpu:1" in job["TresPerNode"],
        "typed_gres": lambda: "gpu:ctgpu:1" in job["TresPerNode"],
        "mem_per_gpu": lambda: job["MemPerTres"] == "gres:gpu:4096" and job["Account"] == "ci-other",
    }
    assert checks[profile](), f"{profile}: {job}"


@pytest.mark.image
def test_every_site_pattern_submits_and_runs(cpu_image, slurm_cluster, demo_data, runs_dir, tmp_path, monkeypatch):
    # The last job also comes from a site whose batch shells need the module system's init, charged to the user's
    # second account (a per-user setting).
    init = tmp_path / "modules.sh"
    init.write_text(FAKE_MODULES)
    with_modules = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    with_modules.update(module_init=str(init), modules=["apptainer/1.3"])
    (tmp_path / "ci-slurm.yaml").write_text(yaml.safe_dump(with_modules, sort_keys=False))
    profiles = {"default_partition": "ci-slurm", "qos": "ci-slurm", "gpu_memory": "ci-slurm",
                "typed_gpus": "ci-slurm", "typed_gres": "ci-slurm", "mem_per_gpu": str(tmp_path / "ci-slurm.yaml")}
    jobs = {}
    for profile, cluster in profiles.items():
        if profile == "mem_per_gpu":
            (tmp_path / "settings.yaml").write_text("clusters:\n  ci-slurm: {account: ci-other}\n")
            monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
        done = run_cluster(cluster, profile, "demo", "--set", f"data.root={demo_data}", *SMALL, "--run-id", profile,
                           "--no-wait")
        assert done.returncode == 0, done.stdout + done.stderr
        jobs[profile] = manifest(runs_dir / profile)["scheduler"]["job_id"]
    for profile, job_id in jobs.items():  # all six side by side: one fake GPU each
        state = wait_for_slurm_job(job_id)
        log = job_logs(runs_dir / profile)
        assert state == "COMPLETED", f"{profile}: {log[-3000:]}"
        placed_as_asked(profile, slurm_job(job_id))
        results = json.loads((runs_dir / profile / "results.json").read_text())
        assert results["epochs"] == 1, profile
    assert "[fake-module] load apptainer/1.3" in job_logs(runs_dir / "mem_per_gpu")


def golden_slurm_scripts():
    for path in sorted((ROOT / "tests" / "golden" / "ci-slurm").glob("*.txt")):
        yield path.stem, path.read_text().split(" script (dry run: nothing submitted) ---\n", 1)[1]


@pytest.mark.parametrize("profile, script", list(golden_slurm_scripts()))
def test_sbatch_test_only_accepts_every_golden_script(slurm_cluster, tmp_path, profile, script):
    path = tmp_path / "job.sh"
    path.write_text(script)
    done = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "to start at" in done.stderr, done.stderr


@pytest.mark.parametrize("time", ["1-00:00:00", "0-00:30:00", "7-00:00:00", "1-12", "1-12:30", "36:00:00", "90",
                                  "30:00", "0:30"])
def test_slurm_reads_every_time_form_as_cluster_train_does(slurm_cluster, time):
    """Slurm's own parser (a held job's TimeLimit, never run) and Scheduler.time_seconds give one limit; Slurm counts
    whole minutes, rounding up."""
    from cluster_train.host.schedulers import adapter

    done = subprocess.run(["sbatch", "--parsable", "--hold", f"--time={time}", "-p", "ci", "--output=/dev/null",
                           "--chdir=/tmp", "--wrap", "true"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    try:
        limit = slurm_job(job_id)["TimeLimit"]  # D-HH:MM:SS or HH:MM:SS
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)
    slurm = adapter("slurm")
    assert slurm.time_seconds(limit) == -(-slurm.time_seconds(time) // 60) * 60, limit


def test_check_cluster_has_slurm_parse_every_profile(slurm_cluster, tmp_path):
    done = run_cluster("check-cluster", "ci-slurm")
    assert done.returncode == 0, done.stderr
    profiles = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())["profiles"]
    assert done.stdout.count("slurm accepts it") == len(profiles), done.stdout


def test_another_sites_file_is_checked_without_this_machines_slurm(slurm_cluster, tmp_path):
    """gilbreth's file here, where Slurm serves cluster ct: check-cluster had the test Slurm refuse every profile
    ("Invalid partition name") and compared the file with its partitions, and a dry run quoted its "Invalid
    account"; ci-slurm's own file is still asked (the tests above)."""
    done = run_cluster("check-cluster", "gilbreth")
    assert done.returncode == 0 and "Slurm serves cluster 'ct', not 'gilbreth', so it is not asked" in done.stdout, \
        done.stderr
    (tmp_path / "settings.yaml").write_text("clusters:\n  gilbreth: {account: lusu}\n")
    dry = run_cluster("gilbreth", "n1_gpu1", "demo", "--set", f"data.root={tmp_path}", "--dry-run",
                      env={**os.environ, "CT_SETTINGS": str(tmp_path / "settings.yaml")})
    assert dry.returncode == 0, dry.stderr
    assert "start: no estimate (this machine's Slurm serves cluster 'ct', not 'gilbreth'" in dry.stdout


def test_check_cluster_reports_what_slurm_refuses(slurm_cluster, tmp_path):
    """Right by the schema, wrong for this site: a QOS, an account and a feature the cluster does not have."""
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["profiles"] = {"no_such_qos": {**cluster["profiles"]["qos"], "qos": "premium"},
                           "no_such_feature": {**cluster["profiles"]["qos"], "qos": "", "constraint": "nvlink"},
                           "fine": cluster["profiles"]["qos"]}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    done = run_cluster("check-cluster", tmp_path / "site.yaml")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert "'no_such_qos': slurm on this machine refuses the script" in lines[0] and "qos" in lines[0].lower()
    assert "'no_such_feature': slurm on this machine refuses the script" in lines[1]
    assert "feature" in lines[1].lower()
    assert "ok fine:" in done.stdout
