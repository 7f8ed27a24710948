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
