"""The budget and first-to-start through the Python door, on the real test Slurm cluster (issue 57): the same checks
and words as the command line's --strict-budget and --first-to-start (tests/cluster/test_estimates.py and
test_launch_shapes.py run those)."""
import getpass
import json
import subprocess

import pytest

from conftest import wait_for_slurm_job

import cluster_train as ct

SMALL = {"data.num_workers": 0, "trainer.max_epochs": 1, "trainer.limit_train_batches": 2,
         "trainer.limit_val_batches": 1}


def queued_ids() -> set:
    done = subprocess.run(["squeue", "-h", "-u", getpass.getuser(), "-o", "%i"], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.split())


@pytest.mark.image
@pytest.mark.slurm
def test_a_job_that_may_pass_the_budget_is_refused_from_python_with_strict_budget_and_warned_of_without(
        cpu_image, slurm_cluster, demo_data, runs_dir, tmp_path, monkeypatch, capsys):
    """0.1 GPU-hours for the day, a job that may take 0.33: refused by check() and submit() in --strict-budget's
    line, nothing queued or written; without strict, the dry run carries the command line's warning (Slurm's
    accounting asked) and the library prints nothing."""
    (tmp_path / "settings.yaml").write_text(json.dumps({"clusters": {"ci-slurm": {
        "budget": {"gpu_hours": 0.1, "period": "1d"}}}}))
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    overrides = {"data.root": str(demo_data), **SMALL}
    before = queued_ids()
    strict = ct.Job("ci-slurm", "n1_gpu1", "demo", overrides=overrides, strict_budget=True)
    with pytest.raises(ct.ClusterTrainError, match="more than the whole budget of 0.1") as refused:
        strict.submit()
    assert "--strict-budget refuses it; shorten the time limit" in str(refused.value)
    assert strict.check() == [str(refused.value)]
    assert queued_ids() <= before and not list(runs_dir.iterdir())  # nothing queued, nothing written
    dry = ct.Job("ci-slurm", "n1_gpu1", "demo", overrides=overrides).dry_run()
    warned = [w for w in dry.warnings if w.startswith("warning: budget on ci-slurm: ")]
    assert warned and "(Slurm's accounting, all your jobs)" in warned[0], dry.warnings
    assert "it may pass your budget" in warned[0] and capsys.readouterr() == ("", "")


@pytest.mark.image
@pytest.mark.slurm
def test_first_to_start_from_python_keeps_the_job_that_starts_and_cancels_the_other(cpu_image, slurm_cluster,
                                                                                    demo_data, runs_dir, capsys):
    """n1_gpu1_later may not begin for an hour: n1_gpu1 starts first and is the Run returned; the other is CANCELLED
    in Slurm and its manifest says it lost. The winner is cancelled too once it has won (its training is not the
    point)."""
    overrides = {"data.root": str(demo_data), **SMALL}
    later, now = (ct.Job("ci-slurm", profile, "demo", overrides=overrides) for profile in ("n1_gpu1_later", "n1_gpu1"))
    winner = ct.first_to_start([later, now], timeout_s=120)
    assert capsys.readouterr() == ("", "")
    manifests = {run.path.name: json.loads((run.path / "manifest.json").read_text())
                 for run in [winner, *winner.cancelled]}
    won, lost = manifests[winner.path.name], manifests[winner.cancelled[0].path.name]
    assert won["profile"] == "n1_gpu1" and lost["profile"] == "n1_gpu1_later" and len(winner.cancelled) == 1
    assert won["first_to_start"]["won"] and not lost["first_to_start"]["won"]
    assert wait_for_slurm_job(lost["scheduler"]["job_id"], 30) == "CANCELLED"
    subprocess.run(["scancel", won["scheduler"]["job_id"]], check=True)
    assert wait_for_slurm_job(won["scheduler"]["job_id"], 60) in ("CANCELLED", "COMPLETED")
