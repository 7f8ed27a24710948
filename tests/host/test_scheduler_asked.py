"""Only the scheduler that serves a cluster file's cluster is asked about it (issue 55 item 11): a dry run or
check-cluster of another site's file on a machine with a Slurm of its own never hands a script to that Slurm's
`sbatch --test-only`, nor compares the file with its partitions; and what sbatch says is quoted by the line that
says it, not one printed beside it. Stand-ins for scontrol, sbatch, sinfo and sacctmgr first on PATH record each
call; the real test cluster's side is tests/cluster/test_slurm_sites.py."""
import os

import pytest

from conftest import ROOT, run_cluster

CALLS = "calls.log"
CONFIG = 'if [ "$1 $2" = "show config" ]; then printf "ClusterName = ct\\nMaxArraySize = 2\\n"; fi'  # ping answers
ACCEPTED = ('echo "sbatch: Job 3 to start at 2026-12-01T10:00:00 using 1 processors on nodes n1 in partition ci" >&2; '
            'echo "sbatch:   Preempts: 45,44" >&2')
REFUSED = ('echo "sbatch: warning: the --mem request is rounded" >&2; echo "allocation failure: Invalid qos '
           'specification" >&2; echo "sbatch:   Preempts: 45,44" >&2; exit 1')


def fake_slurm(tmp_path, monkeypatch, sbatch: str = ACCEPTED) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"scontrol": CONFIG, "sinfo": "exit 1", "sacctmgr": "echo 'ci-lab|'", "sacct": "exit 0", "sbatch": sbatch}
    for name, body in fakes.items():
        record = "" if name == "scontrol" else 'echo "$(basename "$0") $*" >> "$CT_FAKE_CALLS"; '
        (bin_dir / name).write_text(f"#!/bin/bash\n{record}{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CT_FAKE_CALLS", str(tmp_path / CALLS))


def calls(tmp_path) -> str:
    path = tmp_path / CALLS
    return path.read_text() if path.exists() else ""


def ci_slurm_named(tmp_path, name: str) -> str:
    """clusters/ci-slurm.yaml under another file name, its scheduler_cluster kept (ct) or left out."""
    text = (ROOT / "clusters" / "ci-slurm.yaml").read_text().replace("name: ci-slurm", f"name: {name}")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text if name == "mysite" else text.replace("scheduler_cluster: ct", ""))
    return str(path)


def test_a_dry_run_of_another_sites_file_never_asks_this_machines_slurm(store, tmp_path, monkeypatch):
    fake_slurm(tmp_path, monkeypatch)
    done = run_cluster("gilbreth", "n1_gpu1", "demo", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "start: no estimate (this machine's Slurm serves cluster 'ct', not 'gilbreth', so it is not asked; if it " \
           f"is that cluster, set scheduler_cluster: ct in {ROOT / 'clusters' / 'gilbreth.yaml'})" in done.stdout
    assert "sbatch" not in calls(tmp_path)


@pytest.mark.parametrize("name", ["mysite", "other", "CT"])
def test_a_file_of_this_machines_cluster_is_asked_and_its_start_line_quoted(store, tmp_path, monkeypatch, name):
    """scheduler_cluster: ct (ci-slurm's, kept in mysite.yaml) names the cluster this Slurm serves; without it the
    file's name is compared: other is not ct, CT is (Slurm maps a ClusterName to lower case)."""
    fake_slurm(tmp_path, monkeypatch)
    done = run_cluster(ci_slurm_named(tmp_path, name), "n1_gpu1", "demo", "--set", "data.num_workers=0", "--dry-run")
    assert done.returncode == 0, done.stderr
    if name == "other":
        assert "start: no estimate (this machine's Slurm serves cluster 'ct', not 'other'" in done.stdout
        assert "sbatch" not in calls(tmp_path)
        return
    assert "start: Slurm expects it at 2026-12-01T10:00:00 on n1 in partition ci (sbatch --test-only, nothing " \
           "queued)" in done.stdout
    assert calls(tmp_path).count("sbatch --test-only") == 1


@pytest.mark.parametrize("name, scripts", [("gilbreth", "--- sweep script (dry run"), ("mysite", "script 1 of 2")])
def test_a_sweep_is_split_at_this_machines_array_limit_only_on_its_cluster(store, tmp_path, monkeypatch, name,
                                                                            scripts):
    """This Slurm's MaxArraySize (2) is its cluster's (mysite: ct), not gilbreth's: three runs are one array there."""
    fake_slurm(tmp_path, monkeypatch)
    cluster = "gilbreth" if name == "gilbreth" else ci_slurm_named(tmp_path, name)
    done = run_cluster(cluster, "n1_gpu1", "demo", "--sweep", "optim.lr=0.1,0.2,0.3", "--dry-run")
    assert done.returncode == 0 and scripts in done.stdout, done.stdout[:600] + done.stderr


def test_check_cluster_of_another_sites_file_asks_nothing_and_says_why(tmp_path, monkeypatch):
    fake_slurm(tmp_path, monkeypatch)
    done = run_cluster("check-cluster", "gilbreth")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("this machine's Slurm serves cluster 'ct', not 'gilbreth', so it is not asked")
    assert "ok n1_gpu1: rendered and checked (no slurm of this cluster here to parse the script)" in done.stdout
    assert calls(tmp_path) == ""  # neither sbatch --test-only nor the drift's sinfo and sacctmgr


def test_doctor_of_another_sites_file_says_which_cluster_this_slurm_serves(store, tmp_path, monkeypatch):
    """It checked gilbreth's account against this machine's accounting: "'lusu' ... is not one root may use". A
    warning, not a problem: a shipped file names no scheduler_cluster, so on its own site's login node (whose
    ClusterName need not be the file's name) the same line says how to tell it so."""
    fake_slurm(tmp_path, monkeypatch)
    done = run_cluster("doctor", "gilbreth")
    scheduler = next(line for line in done.stdout.splitlines() if "scheduler:" in line)
    assert scheduler.startswith("warning ") and "but this machine's Slurm serves cluster 'ct', not 'gilbreth'" in \
        scheduler, done.stdout
    assert f"fix: if this is gilbreth's login node, set scheduler_cluster: ct in {ROOT / 'clusters' / 'gilbreth.yaml'}" \
        f"; if not, run doctor there, or reach it over SSH" in done.stdout, done.stdout
    assert "account: 'lusu', not checked" in done.stdout and "sacctmgr" not in calls(tmp_path), done.stdout


def test_scontrol_show_config_is_asked_once_per_process(tmp_path, monkeypatch):
    """ClusterName and MaxArraySize are read off one `scontrol show config` (up to 10 s on a slow controller), not
    one each time they are asked."""
    from cluster_train.host.schedulers import slurm_inventory

    fake_slurm(tmp_path, monkeypatch)
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.write_text(f'#!/bin/bash\necho "scontrol $*" >> "$CT_FAKE_CALLS"\n{CONFIG}\n')
    for key in ("ClusterName", "MaxArraySize", "ClusterName"):
        assert slurm_inventory.config(key) in ("ct", "2")
    assert calls(tmp_path) == "scontrol show config\n"
    assert slurm_inventory.config("NoSuchKey") is None


def test_a_budget_on_another_sites_cluster_counts_its_runs_not_this_machines_accounting(store, tmp_path,
                                                                                          monkeypatch):
    fake_slurm(tmp_path, monkeypatch)
    (store / "settings.yaml").write_text("clusters:\n  gilbreth: {account: lusu, budget: {gpu_hours: 100}}\n")
    done = run_cluster("gilbreth", "n1_gpu1", "demo", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "GPU-hours used since" in done.stdout and "(cluster-train's runs only: this machine's scheduler serves " \
                                                    "another cluster); this submission" in done.stdout, done.stdout
    assert "sacct" not in calls(tmp_path)  # neither sacct's usage nor sacctmgr's limits


@pytest.mark.parametrize("sbatch, said", [
    (ACCEPTED, "ok qos: rendered, checked, and slurm accepts it (sbatch: Job 3 to start at 2026-12-01T10:00:00 using "
               "1 processors on nodes n1 in partition ci)\n"),
    (REFUSED, "profile 'qos': slurm on this machine refuses the script: allocation failure: Invalid qos "
              "specification\n"),
])
def test_check_cluster_quotes_the_line_that_gives_sbatchs_verdict(tmp_path, monkeypatch, sbatch, said):
    """Not the `Preempts:` line sbatch prints after it (the jobs the test job would preempt), nor a warning."""
    fake_slurm(tmp_path, monkeypatch, sbatch)
    done = run_cluster("check-cluster", ci_slurm_named(tmp_path, "mysite"))
    assert said in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Preempts" not in done.stdout + done.stderr


def test_a_draft_names_the_cluster_its_slurm_serves():
    from cluster_train.host import init_cluster
    from cluster_train.host.schedulers.base import Inventory, LivePartition

    part = LivePartition("gpu", 2, 8, 1, 15, 4, "a100", "", (), (), True)
    assert "\nscheduler_cluster: ct  #" in init_cluster.draft("mysite", Inventory([part], (), (), cluster="ct"))
    assert "scheduler_cluster" not in init_cluster.draft("mysite", Inventory([part], (), ()))
