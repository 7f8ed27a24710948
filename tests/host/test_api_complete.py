"""The Python API as complete as the command line (issue 57 item 4), where no scheduler is needed: an argument of the
wrong kind refused at the door in one line, a function's future (done, exception) and its value that needs torch
to unpickle, a sweep waited on with a progress callback and read as rows, a study named by a relative path. The
same on the test Slurm cluster (one array of Executor.map, a sweep's progress, a study resumed by a relative path):
tests/cluster/test_api_complete.py."""
import importlib
import os
import pickle
import sys
import types
from pathlib import Path

import pytest
from host.test_api_run import ended, fake_run, running, sweep_of
from host.test_function_call import project  # noqa: F401 (the user's project, a fixture)

import cluster_train as ct
from cluster_train.host.api.function import FunctionRun
from cluster_train.host.jobs import function_call
from cluster_train.host.search import record as rec
from cluster_train.shared import calls

SEARCH = {"space": {"optim.lr": {"log_uniform": [1.0e-3, 1.0e-1]}}, "trials": 2,
          "objective": {"metric": "val/acc", "direction": "maximize"}}


def one_line(call) -> str:
    with pytest.raises(ct.ClusterTrainError) as err:
        call()
    assert "\n" not in str(err.value)
    return str(err.value)


def test_an_argument_of_the_wrong_kind_is_one_line_at_the_door(store, capsys):
    job = ct.Job("local", "cpu_1proc", "demo")
    said = "max_parallel='2' must be a whole number or None, e.g. max_parallel=2"
    assert one_line(lambda: job.sweep({"optim.lr": [0.1, 0.01]}, max_parallel="2")) == said
    assert one_line(lambda: job.dry_run(sweep={"optim.lr": [0.1]}, max_parallel="2")) == said
    assert one_line(lambda: job.search(SEARCH, max_parallel="2")) == said
    for timeout in (0, -1):
        assert "give --timeout (timeout_s= from Python) a number of seconds more than 0" in \
            one_line(lambda: job.search(SEARCH, timeout_s=timeout))
    assert one_line(lambda: ct.Executor("local", "cpu_1proc").map(abs, [1], max_parallel=0)) == \
        "max_parallel=0 must be more than 0, e.g. max_parallel=2"
    assert not (store / "runs").exists() or not any((store / "runs").iterdir())
    assert capsys.readouterr() == ("", "")


def test_map_refuses_what_one_array_cannot_be(project, runs_dir):  # noqa: F811
    executor = ct.Executor("local", "cpu_1proc")
    assert one_line(lambda: executor.map(project.add, [])) == \
        "Executor.map(mypkg.jobs.add, ...) got no items; pass at least one"
    assert "a lambda" in one_line(lambda: executor.map(lambda x: x, [1, 2]))
    waiting = ct.Executor("local", "cpu_1proc", after=[fake_run(runs_dir, "first", 0.1)])
    assert one_line(lambda: waiting.map(project.add, [1, 2])).startswith("Executor.map queues one job array, which "
                                                                         "waits for no run (after=)")
    assert [p.name for p in runs_dir.iterdir()] == ["first"]


def with_result(run_dir, outcome: dict) -> FunctionRun:
    calls.write(run_dir / calls.RESULT, calls.outcome(**outcome))
    return FunctionRun(run_dir)


def test_a_function_runs_future_is_done_and_gives_its_exception(tmp_path):
    returned = with_result(ended(fake_run(tmp_path, "returned", 0.1), "0"), {"value": 42})
    assert returned.done() and returned.exception(timeout=5) is None and returned.result() == 42
    raised = with_result(ended(fake_run(tmp_path, "raised", 0.1), "1"),
                         {"error": ValueError("bad x 7"), "traceback_text": "Traceback ...\nValueError: bad x 7"})
    err = raised.exception(timeout=5)
    assert isinstance(err, ct.FunctionError) and isinstance(err.__cause__, ValueError) and "bad x 7" in str(err)
    assert not FunctionRun(running(fake_run(tmp_path, "running", 0.1, results=False))).done()


def test_a_value_that_needs_torch_is_refused_with_the_fix_and_so_is_its_annotation(tmp_path, monkeypatch,
                                                                                   project):  # noqa: F811
    fake = types.ModuleType("torch")  # a class of a package this side lacks, pickled where it was there

    class Tensor:
        pass

    Tensor.__module__, Tensor.__qualname__, fake.Tensor = "torch", "Tensor", Tensor
    monkeypatch.setitem(sys.modules, "torch", fake)
    run_dir = ended(fake_run(tmp_path, "tensor", 0.1), "0")
    calls.write(run_dir / calls.RESULT, {"value": {"loss": Tensor()}})
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(function_call, "installed", lambda package: package != "torch")
    said = one_line(lambda: FunctionRun(run_dir).result())
    assert said.startswith("the function of run tensor returned a value of torch.Tensor, which needs torch to "
                           "unpickle here, where torch is not installed; return plain Python values instead (a "
                           "tensor or an array as value.tolist()"), said
    heavy = Path(project.__file__).with_name("heavy.py")
    heavy.write_text('def weights() -> "torch.Tensor":\n    return 0\n')
    monkeypatch.delitem(sys.modules, "mypkg.heavy", raising=False)
    weights = importlib.import_module("mypkg.heavy").weights
    assert one_line(lambda: ct.Executor("local", "cpu_1proc").submit(weights)).startswith(
        "mypkg.heavy.weights returns torch.Tensor, which needs torch to unpickle here, where torch is not installed")
    assert pickle.loads(pickle.dumps([1.0, 2.0])) == [1.0, 2.0]  # plain values: nothing refused


def test_a_sweep_is_waited_on_with_progress_and_read_as_rows(tmp_path, capsys):
    sweep = ct.Sweep(os.path.relpath(sweep_of(tmp_path, ["0", "1"])))
    assert sweep.path.is_absolute() and [r.path.name for r in sweep.runs] == ["e0", "e1"]
    seen = []
    assert sweep.wait(timeout=5, progress=seen.append).state == ct.State.FAILED
    assert seen[-1] == ct.SweepProgress({"done": 1, "running": 0, "failed": 1, "queued": 0}, 2, 2,
                                        seen[-1].elapsed_s, True)
    rows = sweep.results(as_frame=False)
    assert [(r["element"], r["optim.lr"], r["state"]) for r in rows] == [(0, "0.01", "COMPLETED"), (1, "0.02", "FAILED")]
    assert rows[0]["final_val_acc"] == pytest.approx(0.25) and "final_val_acc" not in rows[1]
    frame = sweep.results()
    assert list(frame["state"]) == ["COMPLETED", "FAILED"] and frame.shape[0] == 2  # pandas is in the test venv
    assert capsys.readouterr() == ("", "")
    assert "is not a sweep's directory" in one_line(lambda: ct.Sweep(sweep.runs[0].path))


def test_a_study_named_by_a_relative_path_is_made_absolute(tmp_path):
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / rec.STUDY).write_text("{}")
    study = ct.Study(os.path.relpath(tmp_path / "study"))
    assert study.path == (tmp_path / "study").resolve()
    assert "timeout_s= from Python" in one_line(lambda: study.resume(timeout_s=0))
