"""Issue 56 review, on the host: a command's `--set data.root=DIR` is the same bind as `--data DIR`, relative to where
it is typed (docs/how-to/own-code.md#your-data says the two do the same); it was taken relative to cluster-train's
checkout, so `--set data.root=data` typed in a project bound cluster-train's own data/ directory without a word."""
from conftest import run_cluster
from host.test_own_code_data import data_dir, project


def test_set_data_root_is_relative_to_where_it_is_typed_as_data_is(store, tmp_path):
    code, root = project(tmp_path), data_dir(tmp_path)
    outs = [run_cluster("local", "cpu_1proc", "--dry-run", *how, "--", "python", "train.py", cwd=code)
            for how in (["--set", "data.root=../mydata"], ["--data", "../mydata"])]
    for done in outs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"-B {root}:{root}:ro " in done.stdout and f"export CT_DATA_ROOT={root}\n" in done.stdout


def test_own_codes_numbers_named_speed_or_input_are_results_not_a_crash():
    """The results contract takes any flat object of numbers; status and report read `speed` and `input` as the
    image's speed facts (dicts) and crashed on a number there ('float' object has no attribute 'get')."""
    from cluster_train.host.reports.report import input_records
    from cluster_train.host.runs.run_status import result_lines

    results = {"final_loss": 0.25, "speed": 1.5, "input": 3}
    assert result_lines(results, own_code=True) == ["  result: final_loss 0.25, speed 1.5, input 3"]
    assert input_records(results) == []
    task = {"final_val_loss": 0.5, "speed": {"resnet": {"input": {"steps": 1}}}}  # a task's per-model speed facts
    assert [name for name, _, _ in input_records(task)] == ["resnet"]


# srun's words, as the test Slurm cluster prints them, where both ranks of n1 raised and srun ended n2's two: srun
# names the ranks of one node that ended alike at once ("tasks 0-1"), and exits 143
RAISED_2X2 = ('#!/bin/bash\necho "ValueError: a bad batch" >&2\n'
              'echo "srun: error: n1: tasks 0-1: Exited with exit code 1" >&2\n'
              'echo "srun: error: n2: tasks 2-3: Terminated" >&2\nexit 143\n')


def test_a_nodes_ranks_raising_together_are_that_exception_not_a_requeued_failure(store, tmp_path):
    """2 nodes x 2 ranks: the first rank of 'tasks 0-1' is the exception's rank; it was read as no rank at all, so
    srun's 143 was a killed rank and the job was requeued as a failure (issue 56 item 1's own case)."""
    from host.test_requeue_resumable import own_code_script
    from host.test_segments import FAKES, start

    from cluster_train.host.runs import causes, segments

    job = start(own_code_script(store, tmp_path, "n2_gpu1"), tmp_path, "0", {**FAKES, "srun": RAISED_2X2},
                SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_NUM_NODES="2")
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 1 and not (tmp_path / "requeued").exists(), out
    (end,) = segments.read(store / "runs" / "long")
    assert (end.how, end.exit_code, end.died, end.failures) == ("FAILED", 1, {"rank": 0, "host": "n1"}, None), end
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    (logs / "job.err").write_text("srun: error: n1: tasks 0-1: Exited with exit code 1\n")
    assert causes.diagnose(tmp_path / "run") == "rank 0 died on host n1; its log lines above say why"
