"""The API is torch-free and typed, and `import cluster_train` alone loads none of the login-node side (the image
runs `python -m train`, the shim over cluster_train.image, which must import nothing more than it did)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_import_cluster_train_loads_nothing_of_the_host_side_until_a_name_is_used():
    done = fresh("import sys, cluster_train\n"
                 "assert not [m for m in sys.modules if m.startswith('cluster_train.')], sorted(sys.modules)\n"
                 "cluster_train.Job\n"
                 "assert 'cluster_train.host.api.job' in sys.modules and 'torch' not in sys.modules\n")
    assert done.returncode == 0, done.stderr


def test_the_api_and_everything_it_imports_is_torch_free():
    done = fresh("import sys, cluster_train as ct\n"
                 "from cluster_train.host.api import job, errors, run\n"
                 "ct.Job('local', 'cpu_1proc', 'demo', overrides={'trainer.max_epochs': 1}).check()\n"
                 "assert 'torch' not in sys.modules and 'lightning' not in sys.modules\n"
                 "assert set(dir(ct)) >= {'Job', 'Run', 'ClusterTrainError'}\n"
                 "assert ct.ClusterTrainError is __import__('cluster_train.shared.errors').shared.errors.UserError\n")
    assert done.returncode == 0, done.stderr


def test_the_package_is_marked_typed_and_the_api_annotated():
    import inspect

    from cluster_train.host.api import job

    assert (ROOT / "cluster_train" / "py.typed").is_file()
    for name, member in [*inspect.getmembers(job.Job, inspect.isfunction),
                         *inspect.getmembers(job.Rerun, inspect.isfunction), ("rerun", job.rerun)]:
        hints = inspect.signature(member).parameters
        unannotated = [p for p in hints.values() if p.name != "self" and p.annotation is inspect.Parameter.empty]
        assert not unannotated and inspect.signature(member).return_annotation is not inspect.Parameter.empty, name
        assert member.__doc__ or name.startswith("_"), f"{name} has no docstring"
