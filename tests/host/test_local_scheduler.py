"""The local adapter (no scheduler, the script detached on this machine): a second submission in the same run
directory (a resume) is waited for, not taken as ended by the first one's exit code."""
import time

from cluster_train.host.schedulers import State, adapter


def _wait_for(local, job_id, run_dir, state, timeout_s=10.0):
    deadline = time.time() + timeout_s
    while local.state(job_id, run_dir)["state"] != state:
        assert time.time() < deadline, local.state(job_id, run_dir)
        time.sleep(0.05)


def test_a_resubmitted_run_is_running_until_its_own_script_ends(tmp_path):
    local = adapter("local")
    (tmp_path / "logs").mkdir()
    first, second = tmp_path / "job.0.sh", tmp_path / "job.sh"
    first.write_text("exit 0\n")
    second.write_text("sleep 1; exit 3\n")
    _wait_for(local, local.submit(first, tmp_path), tmp_path, State.COMPLETED)
    job_id = local.submit(second, tmp_path)
    assert local.state(job_id, tmp_path)["state"] == State.RUNNING
    _wait_for(local, job_id, tmp_path, State.FAILED)
    assert local.state(job_id, tmp_path)["exit_code"] == "3"
