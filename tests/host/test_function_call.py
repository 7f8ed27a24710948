"""A Python function sent into the image: what the image could not import is refused before anything is queued, in one
line naming the fix (cluster_train/host/jobs/function_call.py); the runner (`python -m train call`,
cluster_train/image/call.py) makes the call from a run directory as the job does, writes its value or its exception with
the traceback, and saves the next call for a requeue on the warning signal. Processes of this machine's Python: no
image, no scheduler."""
import importlib
import os
import pickle
import re
import signal
import subprocess
import sys

import pytest
from conftest import ROOT

from cluster_train.host.api.function import Executor, FunctionError, result_of
from cluster_train.host.jobs import function_call
from cluster_train.shared import calls
from cluster_train.shared.calls import Call
from cluster_train.shared.errors import UserError
from cluster_train.shared.exit_codes import REQUEUE

PROJECT = '''
import os, time
from cluster_train.shared.calls import Call

def add(a, b=0):
    return a + b

def fails(x):
    raise ValueError(f"bad x {x}")  # the line the caller must see

class CountTo:
    """Counts in small steps; on the warning its checkpoint hands on how far it got."""
    def __init__(self):
        self.done, self.segments = 0, []
    def __call__(self, n):
        self.segments.append(os.environ.get("CT_RESUMED", "?"))
        while self.done < n:
            print(f"counted {self.done}", flush=True)
            time.sleep(0.1)
            self.done += 1
        return self.done, self.segments
    def checkpoint(self, n):
        return Call(self, n)

def naps(seconds):
    print("napping", flush=True)
    time.sleep(seconds)
    return seconds
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's project, the working directory, its module imported as the user's script would."""
    (tmp_path / "proj" / "mypkg").mkdir(parents=True)
    (tmp_path / "proj" / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "proj" / "mypkg" / "jobs.py").write_text(PROJECT)
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.syspath_prepend(str(tmp_path / "proj"))
    for name in ("mypkg", "mypkg.jobs"):  # each test's own copy
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module("mypkg.jobs")


def refused(fn, *args, by_value=False) -> str:
    with pytest.raises(UserError) as err:
        Executor("local", "cpu_1proc", by_value=by_value).submit(fn, *args)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_what_the_image_could_not_import_is_refused_in_one_line(project, tmp_path):
    def inner(x):
        return x

    assert "a lambda" in refused(lambda: 1) and "by_value=True" in refused(lambda: 1)
    assert "inside another function" in refused(inner)
    main = type(project.add)(project.add.__code__, {"__name__": "__main__"}, "script_fn")
    main.__module__, main.__qualname__ = "__main__", "script_fn"
    assert "defined in __main__" in refused(main) and "notebook cell" in refused(main)
    elsewhere = refused(pytest.approx)  # a module of site-packages, not of the project
    assert elsewhere.startswith("module _pytest.approx (") and "under the code snapshot's root" in elsewhere
    message = refused(project.add, open(os.devnull))  # a file handle does not travel
    assert message.startswith("argument 1 (TextIOWrapper) of mypkg.jobs.add cannot be pickled"), message


def test_the_modules_file_must_be_where_its_dotted_name_says(project, tmp_path):
    assert function_call.module_path(project.add, tmp_path / "proj") == "mypkg/jobs.py"
    with pytest.raises(UserError, match="under the code snapshot's root"):
        function_call.module_path(project.add, tmp_path)  # submitted from above the project: mypkg is proj/mypkg


def test_by_value_carries_the_function_itself(project):
    import cloudpickle  # the images hold it too (containers/*.lock)

    spec = function_call.pickled(Call(lambda x: x * 3, 5), by_value=True)
    assert pickle.loads(spec)() == 15
    assert pickle.loads(function_call.pickled(Call(project.add, 1, b=2), by_value=True))() == 3
    assert cloudpickle.__version__


def test_by_value_is_refused_where_the_images_python_differs_from_this_one():
    """cloudpickle's bytecode from another Python version crashed the image's (seen: 3.11's lambda, 3.13's segfault)."""
    here = "%d.%d" % sys.version_info[:2]
    images = {"cpu": "3.13", "cuda11.6": "3.8"}
    for flavor in ("cpu", "cpu+mine", "cuda11.6"):
        if images[flavor.split("+")[0]] == here:
            function_call.same_python(flavor)
            continue
        with pytest.raises(UserError, match=f"sends Python {here} bytecode and the {re.escape(flavor)} image runs"):
            function_call.same_python(flavor)


def test_by_value_without_cloudpickle_here_says_how_to_get_it(project, monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # import cloudpickle raises ImportError
    message = refused(project.add, 1, by_value=True)
    assert message.startswith("by_value=True needs cloudpickle") and "pip install cloudpickle" in message


def runner(run_dir, call: Call, by_value=False, rank="0"):
    """`python -m train call` as the job starts it: in the snapshot, with the run's variables."""
    calls.write(run_dir / calls.ARGS, function_call.pickled(call, by_value), dumps=bytes)
    env = dict(os.environ, CT_RUN_DIR=str(run_dir), RANK=rank, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, *calls.COMMAND[1:]], cwd=run_dir / "code", env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture
def run_dir(project, tmp_path):
    """A run directory whose code snapshot is the project (the job unpacks it into code/)."""
    path = tmp_path / "run"
    (path / "logs").mkdir(parents=True)
    (path / "code").symlink_to(tmp_path / "proj")
    return path


def test_the_value_comes_back_through_the_run_directory(project, run_dir):
    proc = runner(run_dir, Call(project.add, 2, b=40))
    assert proc.wait(60) == 0, proc.stdout.read()
    assert result_of(run_dir, "COMPLETED") == 42


def test_a_failing_function_raises_on_the_callers_side_with_the_remote_traceback(project, run_dir):
    proc = runner(run_dir, Call(project.fails, 7))
    assert proc.wait(60) == 1, proc.stdout.read()
    with pytest.raises(FunctionError) as err:
        result_of(run_dir, "FAILED")
    assert "raised ValueError: bad x 7" in str(err.value)
    assert 'mypkg/jobs.py", line 9, in fails' in str(err.value) and "the line the caller must see" in str(err.value)
    assert isinstance(err.value.__cause__, ValueError) and err.value.remote_traceback in str(err.value)


def test_a_run_without_a_result_says_how_it_ended(run_dir):
    with pytest.raises(FunctionError, match="ended TERMINATED without a result"):
        result_of(run_dir, "TERMINATED")


def test_the_warning_saves_the_next_call_and_exits_for_a_requeue(project, run_dir):
    proc = runner(run_dir, Call(project.CountTo(), 15))
    for line in proc.stdout:
        if "counted 5" in line:
            break
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(60) == REQUEUE, proc.stdout.read()
    saved = pickle.loads((run_dir / calls.ARGS).read_bytes())
    assert 5 <= saved.fn.done < 15 and saved.args == (15,)
    proc = runner(run_dir, saved)  # the requeued job: goes on from there
    assert proc.wait(60) == 0, proc.stdout.read()
    assert "counted 0" not in proc.stdout.read()
    assert result_of(run_dir, "COMPLETED")[0] == 15


def test_a_plain_function_runs_on_through_the_warning(project, run_dir):
    proc = runner(run_dir, Call(project.naps, 1))
    assert proc.stdout.readline() == "napping\n"  # the runner is in the call
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(60) == 0
    assert result_of(run_dir, "COMPLETED") == 1
