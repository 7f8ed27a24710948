"""The Python API on the real test Slurm cluster: Job(...).submit() queues the job and returns a Run whose
directory holds the manifest; the job trains (one short epoch of the demo)."""
import json

import pytest

from conftest import wait_for_slurm_job

import cluster_train as ct


@pytest.mark.image
@pytest.mark.slurm
def test_a_job_submitted_through_the_api_is_queued_recorded_and_trains(cpu_image, slurm_cluster, demo_data, runs_dir,
                                                                       capsys):
    job = ct.Job("ci-slurm", "n1_gpu1", "demo", overrides={
        "data.root": str(demo_data), "data.num_workers": 0, "trainer.max_epochs": 1,
        "trainer.limit_train_batches": 2, "trainer.limit_val_batches": 1})
    assert job.check() == []
    run = job.submit()
    assert capsys.readouterr() == ("", "")  # the library printed nothing
    assert run.path.parent == runs_dir and (run.path / "job.sh").is_file()
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["profile"] == "n1_gpu1" and manifest["overrides"][-1] == "trainer.limit_val_batches=1"
    state = wait_for_slurm_job(manifest["scheduler"]["job_id"], 300)
    assert state == "COMPLETED", "\n".join(p.read_text() for p in (run.path / "logs").glob("*"))[-3000:]
    assert json.loads((run.path / "results.json").read_text())["world_size"] == 1
