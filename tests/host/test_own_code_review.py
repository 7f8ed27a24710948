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
