"""What a job would cost and when it would start, said before anything is queued (issue 46): the dry run prints the
scheduler's own start estimate (Slurm's `sbatch --test-only`; LSF gives none before a job is queued) and the most
the job can cost, its time limit x its GPUs."""
import datetime
import getpass
import json
import os
import re
import subprocess

import pytest
import yaml
from conftest import ROOT, run_cluster

pytestmark = [pytest.mark.image, pytest.mark.slurm]


def later_cluster(tmp_path, begin: str):
    """ci-slurm's cluster file with one profile, `later`: n1_gpu1 asked to begin no sooner than `begin`."""
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["profiles"] = {"later": {**cluster["profiles"]["n1_gpu1"], "directives": [f"--begin={begin}"]}}
    path = tmp_path / "ci-slurm-later.yaml"
    path.write_text(yaml.safe_dump(cluster))
    return path


def test_a_dry_run_prints_slurm_s_start_estimate_and_the_most_it_costs(cpu_image, slurm_cluster, demo_data,
                                                                        tmp_path, runs_dir):
    """A job that may begin only in two hours: the estimate is Slurm's (two hours from now), not the clock's."""
    begin = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(hours=2)
    dry = run_cluster(later_cluster(tmp_path, begin.isoformat()), "later", "demo", "--set", "data.num_workers=0",
                      "--set", f"data.root={demo_data}", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    estimate = re.search(r"^start: Slurm expects it at (\S+) on n\d in partition ci \(sbatch --test-only, nothing "
                         r"queued\)$", dry.stdout, re.M)
    assert estimate, dry.stdout[:2000]
    assert abs((datetime.datetime.fromisoformat(estimate[1]) - begin).total_seconds()) < 120, (estimate[1], begin)
    assert "cost: at most 0.33 GPU-hours (time 00:20:00 x 1 GPU(s)), each requeue as much again" in dry.stdout
    assert not list(runs_dir.iterdir())  # nothing written, and --test-only queues nothing
    queued = run_cluster(later_cluster(tmp_path, begin.isoformat()), "later", "demo", "--set", "data.num_workers=0",
                         "--set", f"data.root={demo_data}", "--run-id", "later", "--no-wait")
    assert queued.returncode == 0, queued.stderr
    try:  # `runs` shows a pending run's start estimate: squeue's StartTime, its --begin here
        listed = run_cluster("runs", "--here")
        assert re.search(rf"later .*PENDING .*expected start {begin:%Y-%m-%dT%H:%M} \(BeginTime\)", listed.stdout), \
            listed.stdout
    finally:
        job_id = json.loads((runs_dir / "later" / "manifest.json").read_text())["scheduler"]["job_id"]
        subprocess.run(["scancel", job_id])

    lsf = run_cluster("ci-lsf", "single_host_2gpu", "demo", "--set", f"data.root={demo_data}", "--sweep",
                      "optim.lr=0.1,0.2", "--dry-run")
    assert lsf.returncode == 0, lsf.stderr
    assert "start: LSF gives no start estimate before a job is queued" in lsf.stdout
    assert "cost: at most 1.33 GPU-hours (time 0:20 x 2 GPU(s) x 2 runs), each requeue as much again" in lsf.stdout


def budget_settings(tmp_path, **budget) -> dict:
    (tmp_path / "settings.yaml").write_text(json.dumps({"clusters": {"ci-slurm": {"budget": budget}}}))
    return {**os.environ, "CT_SETTINGS": str(tmp_path / "settings.yaml")}


def sacct_gpu_hours(*account: str) -> float:
    """This user's GPU-hours of the last day (of one account's jobs), as Slurm's accounting has them."""
    since = datetime.datetime.now() - datetime.timedelta(days=1)
    done = subprocess.run(["sacct", "-u", getpass.getuser(), "-S", since.strftime("%Y-%m-%dT%H:%M:%S"), "-E", "now",
                           *account, "--duplicates", "-X", "-n", "-P", "-o", "ElapsedRaw,AllocTRES"],
                          capture_output=True, text=True, check=True)
    lines = [line.split("|") for line in done.stdout.splitlines()]
    return sum(int(e) * int(re.search(r"gres/gpu=(\d+)", t)[1]) for e, t in lines if "gres/gpu=" in t) / 3600


def test_a_submission_that_may_pass_the_budget_is_warned_of_or_refused_with_strict_budget(
        cpu_image, slurm_cluster, demo_data, tmp_path, runs_dir):
    """Slurm's accounting of all your jobs since the period began against the budget: a submission whose most
    possible cost (0.33 GPU-hours) fits is told what is left; one that may pass it is warned of, and refused with
    --strict-budget before anything is queued. The site's own limit for the account (GrpTRESMins) is named."""
    demo = ["ci-slurm", "n1_gpu1", "demo", "--set", "data.num_workers=0", "--set", f"data.root={demo_data}"]
    used = sacct_gpu_hours()
    roomy = run_cluster(*demo, "--dry-run", env=budget_settings(tmp_path, gpu_hours=used + 100, period="1d"))
    told = re.search(r"^budget on ci-slurm: ([\d.]+) of [\d.]+ GPU-hours used since .* \(Slurm's accounting, all your "
                     r"jobs\); this submission may take up to 0\.33, ([\d.]+) are left$", roomy.stdout, re.M)
    assert roomy.returncode == 0 and told, roomy.stdout[:1500] + roomy.stderr
    assert abs(float(told[1]) - used) < 0.02 and not roomy.stderr  # jobs of other tests may end meanwhile

    tight = budget_settings(tmp_path, gpu_hours=sacct_gpu_hours("-A", "ci-other") + 0.2, period="1d",
                            account="ci-other")
    subprocess.run(["sacctmgr", "-i", "modify", "user", getpass.getuser(), "where", "account=ci-other", "set",
                    "GrpTRESMins=gres/gpu=6000"], check=True, capture_output=True)
    try:
        warned = run_cluster(*demo, "--dry-run", env=tight)
        refused = run_cluster(*demo, "--strict-budget", "--no-wait", env=tight)
    finally:
        subprocess.run(["sacctmgr", "-i", "modify", "user", getpass.getuser(), "where", "account=ci-other", "set",
                        "GrpTRESMins=gres/gpu=-1"], check=True, capture_output=True)
    assert warned.returncode == 0 and "run-cluster: warning: budget on ci-slurm:" in warned.stderr, warned.stderr
    assert "the site's limit for account ci-other: 100 GPU-hours" in warned.stderr, warned.stderr
    assert "it may pass your budget (--strict-budget refuses such a submission)" in warned.stderr
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "--strict-budget refuses it; shorten the time limit" in refused.stderr
    assert not list(runs_dir.iterdir())  # nothing written, nothing queued
