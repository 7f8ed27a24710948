"""Seed 001 as one command (`run-cluster CLUSTER --pipeline seed001`) on the LSF stand-in, and a failed expert that
cancels fusion, with its cause, on the test Slurm cluster and on the LSF stand-in: the scheduler holds each stage
(sbatch --dependency=afterok, bsub -w done()) and ends it when a stage it waits on fails. The pipeline that completes
on Slurm is seed 001's own test (test_experiments.py)."""
import time
from pathlib import Path

import pytest

from conftest import job_logs, manifest, run_cluster
from cluster_train.host.runs import segments
from cluster_train.host.runs.ending import has_ended, run_state
from cluster_train.host.schedulers import State, adapter

pytestmark = [pytest.mark.image, pytest.mark.slurm]
TINY = ["--set", "trainer.max_epochs=1", "--set", "data.batch_size=16", "--set", "trainer.limit_train_batches=5",
        "--set", "trainer.limit_val_batches=2"]


def ended(run_dir: Path, timeout_s: float = 600) -> dict:
    """The run's end state, as `run-cluster status` reads it."""
    scheduler = adapter(manifest(run_dir)["scheduler"]["name"])
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        state = run_state(scheduler, manifest(run_dir)["scheduler"]["job_id"], run_dir)
        if has_ended(state):
            return state
        time.sleep(2)
    raise AssertionError(f"{run_dir.name} has not ended in {timeout_s} s")


def assert_ran_in_order(first: Path, then: Path) -> None:
    """`then` started only after `first` had ended (each run's own record of its segments, to the second)."""
    expert, fusion = segments.read(first), segments.read(then)
    assert expert and fusion and expert[-1].end <= fusion[0].start, (expert, fusion)


def test_seed_001_on_lsf_trains_fusion_once_the_experts_have_completed(cpu_image, slurm_cluster, demo_data, runs_dir,
                                                                       lsf_path):
    done = run_cluster("ci-lsf", "--pipeline", "seed001", "--set", f"data.root={demo_data}", *TINY, "--set",
                       "task_params.num_experts=2", "--run-id", "s1")  # two experts are enough to fuse
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert manifest(runs_dir / "s1-fusion")["after"][0]["run_id"] == "s1-experts"
    for stage in ("experts", "fusion"):
        state = ended(runs_dir / f"s1-{stage}")
        assert state["state"] == State.COMPLETED, job_logs(runs_dir / f"s1-{stage}")[-3000:]
    assert len(list((runs_dir / "s1-experts" / "checkpoints" / "resnet_cifar").glob("expert_*_best.pth"))) == 2
    fused = runs_dir / "s1-fusion" / "resnet_cifar_fusions" / "multiplicative" / "global" / "fusion_model.pth"
    assert fused.is_file()
    assert_ran_in_order(runs_dir / "s1-experts", runs_dir / "s1-fusion")


@pytest.mark.parametrize("cluster", ["ci-slurm", "ci-lsf"])
def test_a_failed_expert_cancels_fusion_which_says_why(cpu_image, slurm_cluster, runs_dir, tmp_path, request, cluster):
    if cluster == "ci-lsf":
        request.getfixturevalue("lsf_path")
    broken = tmp_path / "broken" / "cifar-100-python"  # its files are there, but no pickle: the experts fail at start
    broken.mkdir(parents=True)
    for name in ("train", "test", "meta"):
        (broken / name).touch()
    done = run_cluster(cluster, "--pipeline", "seed001", "--set", f"data.root={broken.parent}", "--run-id", "bad")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert ended(runs_dir / "bad-experts", 300)["state"] == State.FAILED
    state = ended(runs_dir / "bad-fusion", 60)
    assert state["state"] == State.CANCELLED and not segments.read(runs_dir / "bad-fusion"), state
    status = run_cluster("status", str(runs_dir / "bad-fusion"))
    assert "cause: cancelled: waited on run bad-experts, which ended FAILED" in status.stdout, status.stdout
