"""The Python API as complete as the command line, on the real test Slurm cluster (issue 57 item 4's acceptance):
Executor.map of 4 calls queued as ONE job array, its sweep waited on with a progress callback that sees every element
end, the 4 values back in order; a study whose first driver stopped after its first trial was queued, resumed from
Python by a RELATIVE path (the trials queued after it bind their run directories into Apptainer, which takes only
absolute paths) until its later trial completes. The host-side refusals: tests/host/test_api_complete.py."""
import json
import os
import subprocess

import pytest
from conftest import job_logs
from host.test_function_call import project  # noqa: F401 (the user's project, a fixture)

import cluster_train as ct

pytestmark = [pytest.mark.image, pytest.mark.slurm]
TIMEOUT_S = 300


def test_map_queues_four_calls_as_one_array_and_its_sweep_is_waited_on_with_progress(
        cpu_image, slurm_cluster, runs_dir, project, capsys):  # noqa: F811
    runs = ct.Executor("ci-slurm", "n1_gpu1").map(project.add, [1, 2, 3, 4], [10, 20, 30, 40])
    sweep_dir = runs[0].path.parent
    assert [run.path for run in runs] == [sweep_dir / f"e{i}" for i in range(4)]
    record = json.loads((sweep_dir / "sweep.json").read_text())
    array = record["array_job_id"]
    assert len(record["arrays"]) == 1 and [e["job_id"] for e in record["elements"]] == [f"{array}_{i}" for i in
                                                                                       range(4)]
    seen = []
    status = ct.Sweep(sweep_dir).wait(timeout=TIMEOUT_S, progress=seen.append, poll_s=0.5)
    assert status.state == ct.State.COMPLETED, [job_logs(run.path)[-1500:] for run in runs]
    assert seen[-1].final and (seen[-1].ended, seen[-1].total, seen[-1].counts["done"]) == (4, 4, 4), seen[-1]
    assert [run.result(timeout=5) for run in runs] == [11, 22, 33, 44]
    accounted = subprocess.run(["sacct", "-n", "-X", "-P", "-j", array, "-o", "JobID"], capture_output=True,
                               text=True, check=True).stdout.split()
    assert sorted(accounted) == [f"{array}_{i}" for i in range(4)], accounted  # one array, 4 elements: one sbatch
    assert [row["state"] for row in ct.Sweep(sweep_dir).results(as_frame=False)] == ["COMPLETED"] * 4
    assert capsys.readouterr() == ("", "")  # the library printed nothing


def test_a_study_resumed_by_a_relative_path_completes_its_later_trials(cpu_image, slurm_cluster, demo_data,
                                                                      runs_dir, capsys):
    search = {"space": {"optim.lr": {"log_uniform": [1.0e-3, 1.0e-1]}}, "trials": 2,
              "objective": {"metric": "val/acc", "direction": "maximize"}}
    job = ct.Job("ci-slurm", "n1_gpu1", "demo", run_id="rel", overrides={
        "data.root": str(demo_data), "data.num_workers": 0, "trainer.max_epochs": 1,
        "trainer.limit_train_batches": 2, "trainer.limit_val_batches": 1})
    first = []
    study = job.search(search, max_parallel=1, timeout_s=0.01, progress=first.append)  # stops after queuing one
    assert [p.event.split(":")[0] for p in first] == ["trial 0 queued"], [p.event for p in first]
    relative = os.path.relpath(study.path)
    assert not os.path.isabs(relative)
    seen = []
    ct.Study(relative).resume(timeout_s=600, progress=seen.append)
    events = [p.event for p in seen]
    assert any(e.startswith("trial 1 queued") for e in events) and seen[-1].final, events
    trials = ct.Study(relative).trials()
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE"], (events, trials)
    assert all(os.path.isabs(t["run_dir"]) for t in trials)
    assert capsys.readouterr() == ("", "")
