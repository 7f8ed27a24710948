"""`Run` and `runs()` (cluster_train/host/api/run.py) on run directories made here in the real formats (tests/host/
test_report.py's fake runs, on the local runner: its logs/exit_code is the job's end): the status of a finished run
from its records and the CLI's same words, results and metrics, a missing results.json, waiting, following the log,
a sweep's elements, the listing's filters. The real schedulers' cases: tests/cluster/test_commands.py (Slurm) and
tests/cluster/test_lsf_standin.py (LSF)."""
import json
import os
import threading
import time
from pathlib import Path

import pytest
from host.test_report import fake_run

from cluster_train.shared.errors import UserError
from cluster_train.host import cli
from cluster_train.host.api.run import Run, RunStatus, State, runs
from cluster_train.host.runs.metrics import read_metrics


def ended(run_dir: Path, exit_code: str) -> Path:
    """The local runner's word that the job ended with this exit status."""
    (run_dir / "logs" / "exit_code").write_text(f"{exit_code}\n")
    return run_dir


def running(run_dir: Path) -> Path:
    """A job the local runner sees alive: its job id is this test's own process."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["scheduler"]["job_id"] = str(os.getpid())
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


def test_a_finished_runs_status_results_and_metrics_come_from_its_records(tmp_path, capsys):
    run = Run(ended(fake_run(tmp_path, "lr-0.05", 0.05), "0"))
    assert (run.id, run.cluster, run.profile) == ("lr-0.05", "local", "cpu_1proc")
    assert run.config == json.loads((run.path / "manifest.json").read_text())["config"]
    assert run.config["optim"]["lr"] == 0.05
    status = run.status()
    assert (status.state, status.ended, status.cause, status.job_id) == (State.COMPLETED, True, "", "4242")
    assert [s.how for s in status.segments] == ["COMPLETED"]
    assert run.results() == status.results == json.loads((run.path / "results.json").read_text())
    rows = run.metrics()
    assert rows[0] == {"epoch": 0, "step": 0, "val/acc": 0.01, "val/loss": 4.6}  # empty cells left out
    assert isinstance(rows[1]["step"], int) and isinstance(rows[1]["train/loss"], float)
    assert len(rows) == 1 + 3 * (5 + 1)
    assert run.cancel() == "local job 4242 (lr-0.05) has ended: COMPLETED; nothing to cancel"
    assert run.report() == run.path / "report.html"
    assert cli.main(["status", "--json", str(run.path)]) == 0  # what a laptop reads of a run over SSH
    assert RunStatus.from_dict(json.loads(capsys.readouterr().out)) == status


def test_the_cli_prints_the_apis_status_in_its_words(tmp_path, capsys):
    run = Run(ended(fake_run(tmp_path, "lr-0.01", 0.01, results=False), "1"))
    (run.path / "logs" / "job.out").write_text("epoch 1\nsrun: error: n2: task 1: Killed\n")
    status = run.status()
    assert (status.state, status.ended) == (State.FAILED, True)
    assert status.cause == "rank 1 died on host n2; its log lines above say why"
    assert cli.main(["status", str(run.path)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("lr-0.01: local job 4242 FAILED exit_code=1\n")
    assert f"  cause: {status.cause}\n" in printed
    assert run.logs() == "epoch 1\nsrun: error: n2: task 1: Killed\n"


def test_a_run_without_results_says_which_run_and_its_state(tmp_path):
    run = Run(running(fake_run(tmp_path, "lr-0.1", 0.1, results=False)))
    with pytest.raises(UserError) as refused:
        run.results()
    assert str(refused.value) == (f"run lr-0.1 has no results.json yet (it is RUNNING); wait for it to complete: "
                                  f"Run({str(run.path)!r}).wait()")
    run = Run(ended(fake_run(tmp_path, "own-code", 0.1, results=False), "0"))  # a command that writes none
    (run.path / "checkpoints").mkdir()
    with pytest.raises(UserError) as refused:  # waiting would change nothing: what it did write instead
        run.results()
    assert str(refused.value) == "run own-code ended COMPLETED and wrote no results.json; it wrote checkpoints/, " \
                                 "metrics.csv"
    run = Run(ended(fake_run(tmp_path, "failed", 0.1, results=False), "1"))
    (run.path / "metrics.csv").unlink()
    with pytest.raises(UserError, match="^run failed ended FAILED and wrote no results.json; it wrote nothing besides its logs$"):
        run.results()
    assert run.wait(timeout=5).state == State.FAILED  # ended: at once
    for bad in (tmp_path / "nothing-here", "no-such-run-id"):
        with pytest.raises(UserError, match="run"):
            Run(bad)


@pytest.mark.parametrize("how", ["rerun", "resume"])
def test_rerun_and_resume_refuse_in_the_clis_words_and_queue_nothing(runs_dir, capsys, how):
    """A rerun whose recorded image is not here, a resume of a completed run that would train nothing."""
    run = Run(ended(fake_run(runs_dir, "done", 0.05), "0"))
    with pytest.raises(UserError) as refused:
        getattr(run, how)()
    assert cli.main([f"--{how}" if how == "rerun" else how, str(run.path)]) == 2
    assert capsys.readouterr().err == f"run-cluster: error: {refused.value}\n"
    assert "image store" in str(refused.value) if how == "rerun" else "would train nothing" in str(refused.value)
    assert [p.name for p in runs_dir.iterdir()] == ["done"]


def test_a_packed_runs_results_are_each_tasks_by_name(tmp_path):
    run_dir = ended(fake_run(tmp_path, "packed", 0.1, results=False), "0")
    record = json.loads((run_dir / "manifest.json").read_text())
    record["job"]["tasks"] = [{"name": "task-0-a"}, {"name": "task-1-b"}]  # what a packed profile's job records
    (run_dir / "manifest.json").write_text(json.dumps(record))
    for name, acc in (("task-0-a", 0.5), ("task-1-b", 0.25)):
        (run_dir / name).mkdir()
        (run_dir / name / "results.json").write_text(json.dumps({"final_val_acc": acc}))
    assert Run(run_dir).results() == {"task-0-a": {"final_val_acc": 0.5}, "task-1-b": {"final_val_acc": 0.25}}
    (run_dir / "task-1-b" / "results.json").unlink()
    with pytest.raises(UserError, match="^run packed ended COMPLETED and wrote no task-1-b/results.json"):
        Run(run_dir).results()


def test_wait_times_out_on_a_running_job_and_logs_follow_yields_lines_until_it_ends(tmp_path):
    run = Run(running(fake_run(tmp_path, "live", 0.1, results=False)))
    with pytest.raises(TimeoutError, match=r"did not finish within 0 s \(state RUNNING\); it goes on"):
        run.wait(timeout=0.3, poll_s=0.1)
    log = run.path / "logs" / "job.out"
    log.write_text("first\nsec")

    def job() -> None:
        time.sleep(0.5)
        with log.open("a") as f:
            f.write("ond\nthird\n")
        time.sleep(0.5)
        ended(run.path, "0")

    writer = threading.Thread(target=job)
    writer.start()
    assert list(run.logs(follow=True)) == ["first\n", "second\n", "third\n"]
    writer.join()
    assert run.wait(timeout=5).state == State.COMPLETED
    with log.open("a") as f:
        f.write("[cluster-train] epoch 1/1 step 3 train/loss 0.5000 val/loss - (1.0 s)\n")
    said = []  # a script's own progress callback: the state and rank 0's last epoch line
    assert run.wait(timeout=5, progress=said.append).state == State.COMPLETED
    assert said[-1].final and said[-1].stage == "COMPLETED, epoch 1/1 step 3 train/loss 0.5000", said


def sweep_of(tmp_path: Path, exit_codes) -> Path:
    """A sweep directory as cluster_train/host/runs/sweep.py writes it, on the local runner."""
    sweep_dir = tmp_path / "sw"
    elements = []
    for i, code in enumerate(exit_codes):
        run_dir = ended(fake_run(sweep_dir, f"e{i}", 0.01 * (i + 1), results=code == "0"), code)
        elements.append({"index": i, "run_dir": str(run_dir), "values": {"optim.lr": str(0.01 * (i + 1))},
                         "job_id": "4242"})
    record = {"sweep_id": "sw", "scheduler": "local", "array_job_id": "4242", "arrays": [{"job_id": "4242"}],
              "max_parallel": 2, "axes": [{"key": "optim.lr", "values": ["0.01", "0.02"]}], "elements": elements}
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    return sweep_dir


def test_a_sweep_is_a_run_whose_runs_are_its_elements(tmp_path, capsys):
    sweep = Run(sweep_of(tmp_path, ["0", "1"]))
    assert sweep.is_sweep and sweep.id == "sw" and [r.path.name for r in sweep.runs] == ["e0", "e1"]
    status = sweep.status()
    assert (status.state, status.ended, status.cause) == (State.FAILED, True, "e1 FAILED")
    assert [row["state"] for row in status.details.values()] == ["COMPLETED", "FAILED"]
    assert sweep.wait(timeout=5).state == State.FAILED
    assert "==> e0 (optim.lr=0.01) <==" in sweep.logs()
    assert cli.main(["status", str(sweep.path)]) == 0
    assert "\ne1       0.02      FAILED     1         0.00   -\n" in capsys.readouterr().out


def test_runs_lists_this_machines_runs_by_state(runs_dir):
    done = Run(ended(fake_run(runs_dir, "done", 0.05), "0"))
    failed = Run(ended(fake_run(runs_dir, "failed", 0.05, results=False), "1"))
    assert {done, failed} <= set(runs(cluster="local"))
    assert done in runs(state=State.COMPLETED) and failed not in runs(state="completed")
    assert failed in runs(state="FAILED") and not runs(cluster="no-such-cluster")


def test_metrics_cells_read_as_numbers(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,val/loss,note\n0,3,,warm\n1,7,1.5e-1,\n")
    assert read_metrics(path) == [{"epoch": 0, "step": 3, "note": "warm"}, {"epoch": 1, "step": 7, "val/loss": 0.15}]
    assert read_metrics(tmp_path / "none.csv") == []


def test_each_kind_of_run_directory_answers_through_its_own_backend_and_run_has_no_branch_of_its_own(tmp_path):
    """A run of this machine, a sweep and a run over SSH (its runs/<id> holds remote.json: nothing is asked of the
    cluster until a question is) behind one interface; Run's methods only delegate (no `if` on where a run lives:
    its remote cases are tests/cluster/test_remote.py's, on a real sshd)."""
    import ast
    import inspect

    from cluster_train.host.api import records
    from cluster_train.host.api.run import Run as ApiRun

    remote = tmp_path / "there"
    remote.mkdir()
    (remote / "remote.json").write_text(json.dumps({"run_id": "there", "cluster": "ci-slurm", "ssh": "ct-nowhere"}))
    kinds = {type(Run(path)._record) for path in (fake_run(tmp_path, "here", 0.1), sweep_of(tmp_path, ["0"]), remote)}
    assert kinds == {records.LocalRun, records.LocalSweep, records.SshRun}
    assert (Run(remote).id, Run(remote).cluster, Run(remote).is_sweep) == ("there", "ci-slurm", False)
    tree = ast.parse(inspect.getsource(ApiRun))
    branches = [ast.unparse(node.test) for node in ast.walk(tree) if isinstance(node, (ast.If, ast.IfExp))]
    assert not [test for test in branches if "_record" in test or "remote" in test.replace("remote.json", "")], \
        branches
