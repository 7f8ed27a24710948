"""A Python function sent into the CPU image (cluster_train/host/api/function.py) on the test Slurm cluster and the LSF
stand-in: one function returns its value, one raises and its remote traceback is raised on the caller's side (a
requeued checkpointable function: examples/api/function_call.py, run by test_api_examples.py). Short jobs of a few
seconds each, no training."""
import pytest
from conftest import job_logs
from host.test_function_call import PROJECT, project  # noqa: F401 (the user's project, a fixture)

from cluster_train.host.api.function import Executor, FunctionError

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
    assert failed.status().cause == "the function raised ValueError: bad x 7"  # not the rank's exit: what it raised


def test_a_function_returns_its_value_and_a_failing_one_raises_on_slurm(cpu_image, slurm_cluster, runs_dir,
                                                                      project):  # noqa: F811
    returns_and_raises(Executor("ci-slurm", "n1_gpu1"), project)


def test_a_function_returns_its_value_and_a_failing_one_raises_on_lsf(cpu_image, runs_dir, lsf_path,
                                                                    project):  # noqa: F811
    returns_and_raises(Executor("ci-lsf", "one_gpu"), project)
