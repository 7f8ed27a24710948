"""A Python function sent into the CPU image (cluster_train/host/api/function.py) on the test Slurm cluster and the LSF
stand-in: one function returns its value, one raises and its remote traceback is raised on the caller's side; on
Slurm a checkpointable function warned with USR1 (what --signal=B:USR1@N delivers) saves its next call, is requeued
and finishes from where it was. Short jobs of a few seconds each, no training."""
import subprocess
import time

import pytest
from conftest import job_logs, manifest, release_requeued
from host.test_function_call import PROJECT, project  # noqa: F401 (the user's project, a fixture)

from cluster_train.host.api.function import Executor, FunctionError
from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
TIMEOUT_S = 300


def returns_and_raises(executor: Executor, jobs) -> None:
    added, failed = executor.submit(jobs.add, 2, b=40), executor.submit(jobs.fails, 7)  # both queued at once
    assert added.result(timeout=TIMEOUT_S) == 42, job_logs(added.path)[-3000:]
    with pytest.raises(FunctionError) as err:
        failed.result(timeout=TIMEOUT_S)
    remote_frame = f'{failed.path}/code/mypkg/jobs.py", line 9, in fails'  # the frame as it ran in the image
    assert remote_frame in str(err.value) and "ValueError: bad x 7" in str(err.value), str(err.value)
    assert isinstance(err.value.__cause__, ValueError)


def test_a_function_returns_its_value_and_a_failing_one_raises_on_slurm(cpu_image, slurm_cluster, runs_dir,
                                                                      project):  # noqa: F811
    returns_and_raises(Executor("ci-slurm", "n1_gpu1"), project)


def test_a_function_returns_its_value_and_a_failing_one_raises_on_lsf(cpu_image, runs_dir, lsf_path,
                                                                    project):  # noqa: F811
    returns_and_raises(Executor("ci-lsf", "one_gpu"), project)


def test_a_checkpointable_function_is_requeued_and_goes_on_from_its_saved_call(cpu_image, slurm_cluster, runs_dir,
                                                                               project):  # noqa: F811
    run = Executor("ci-slurm", "n1_gpu1").submit(project.CountTo(), 40)  # 4 s of counting
    job_id = manifest(run.path)["scheduler"]["job_id"]
    deadline = time.time() + TIMEOUT_S
    while "counted 10" not in job_logs(run.path):
        assert time.time() < deadline, job_logs(run.path)[-3000:]
        time.sleep(0.5)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True)
    while [s.how for s in segments.read(run.path)][-1:] != ["COMPLETED"]:
        assert time.time() < deadline, job_logs(run.path)[-3000:]
        release_requeued(job_id)
        time.sleep(1)
    done, resumed = run.result(timeout=10)
    assert done == 40 and resumed == ["0", "1"], job_logs(run.path)[-3000:]  # the saved object went on counting
    assert "checkpoint saved (REQUEUED)" in job_logs(run.path)
