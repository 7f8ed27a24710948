"""A failed expert of seed 001's pipeline cancels fusion, with its cause, on the test Slurm cluster and on the LSF
stand-in: the scheduler holds each stage (sbatch --dependency=afterok, bsub -w done()) and ends it when a stage it
waits on fails. The pipeline that completes, on both, is examples/api/seed001_pipeline.py's (test_api_examples.py)."""
import time
from pathlib import Path

import pytest

from conftest import manifest, run_cluster
from cluster_train.host.runs import segments
from cluster_train.host.runs.ending import has_ended, run_state
from cluster_train.host.schedulers import State, adapter

pytestmark = [pytest.mark.image, pytest.mark.slurm]


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
