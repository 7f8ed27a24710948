"""The record of a run of your own code (issue 56 item 6): its config is its command, code and binds (no task
defaults), --rerun starts from that config; report.html shows your project's commit and dirty flag; the results
contract (metrics.csv and results.json in $CT_RUN_DIR) puts the curves and results of examples/ddp_plain, trained here
on one rank as its job would train it, into the report, `compare`, `runs` and `status`. Submission is stood in (job
4242), so no image runs; the same example through the image: tests/cluster/test_user_code_jobs.py."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

import pytest
import yaml
from conftest import ROOT
from host.test_report import curve_points

import cluster_train as ct
from cluster_train.shared import config as cfg
from cluster_train.host import cli
from cluster_train.host.reports.report import write_report
from cluster_train.host.views import table

TASK_VALUES = ("resnet_cifar", "cifar100", "sgd", "max_epochs", "classify")  # the default experiment's


@pytest.fixture
def queued(store, monkeypatch):
    """Every local submission answers job 4242 at once, running nothing."""
    from cluster_train.host.schedulers import SCHEDULERS

    monkeypatch.setattr(SCHEDULERS["local"], "submit", lambda script, run_dir: "4242")
    return store / "runs"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def project(tmp_path):
    """examples/ddp_plain as a user's git project, committed, then changed (uncommitted): its commit is not ours."""
    code = tmp_path / "proj"
    shutil.copytree(ROOT / "examples" / "ddp_plain", code)
    git(code, "init", "-q")
    git(code, "add", ".")
    git(code, "commit", "-qm", "mine")
    (code / "NOTES.md").write_text("not committed yet\n")
    return code


@pytest.fixture
def data(tmp_path):
    """A directory the command reads, bound read-only (--set data.root=DIR)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.bin").write_bytes(b"\0")
    return tmp_path / "data"


def submit(project: Path, run_id: str, steps: int, data: Path) -> ct.Run:
    return ct.Job("local", "cpu_1proc", str(project / "experiment.yaml"), run_id=run_id, stale_image_ok=True,
                  overrides={"data.root": str(data)}, command=None if steps == 200 else
                  ["python", "train.py", "--steps", str(steps)]).submit()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_as_their_jobs(trained: Dict[ct.Run, int]) -> None:
    """Each run's snapshot train.py (run: steps) as its job runs it on one rank (its variables, in runs/<id>/code),
    all at once, then each run's end as the batch shell and the local scheduler record it."""
    started = {run: subprocess.Popen(
        [sys.executable, "train.py", "--steps", str(steps)], cwd=run.path / "code", stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(free_port()), "CT_RUN_DIR": str(run.path)}) for run, steps in trained.items()}
    for run, proc in started.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        events = [{"event": "start", "segment": 1, "job_id": "4242", "hosts": "node1", "time": now},
                  {"event": "end", "segment": 1, "how": "COMPLETED", "exit_code": 0, "time": now}]
        (run.path / "logs" / "segments.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        (run.path / "logs" / "exit_code").write_text("0\n")


def test_the_config_of_an_own_code_run_is_its_command_code_and_binds_and_reruns(queued, project, data):
    dry = ct.Job("local", "cpu_1proc", str(project / "experiment.yaml"), stale_image_ok=True,
                 overrides={"data.root": str(data)}).dry_run()
    run = submit(project, "own", 200, data)
    saved = yaml.safe_load((run.path / "config.yaml").read_text())
    assert {**dry.config, "output_dir": ""} == {**saved, "output_dir": ""}  # the API's dry run shows what is saved
    assert saved == json.loads((run.path / "manifest.json").read_text())["config"]
    assert saved["command"] == ["python", "train.py", "--steps", "200"] and saved["code"] == str(project)
    assert saved["data"]["root"] == str(data) and saved["trainer"]["devices"] == 1  # its bind, its shape
    assert not {"task", "model", "optim"} & set(saved) and "max_epochs" not in saved["trainer"], saved
    assert not any(word in (run.path / "config.yaml").read_text() for word in TASK_VALUES)
    assert cfg.load(run.path / "config.yaml").command == saved["command"]  # as the image loads it
    again = ct.rerun(run, run_id="again")
    rerun = yaml.safe_load((again.path / "config.yaml").read_text())
    assert {**rerun, "output_dir": ""} == {**saved, "output_dir": ""}, (rerun, saved)


def test_report_compare_runs_and_status_show_own_codes_results_curves_and_commit(queued, project, data, capsys,
                                                                                 monkeypatch):
    long, short = submit(project, "long", 200, data), submit(project, "short", 40, data)
    train_as_their_jobs({long: 200, short: 40})
    commit = git(project, "rev-parse", "HEAD")
    page = write_report(long.path).read_text()
    points = {p["column"]: p["points"] for p in curve_points(page)}
    assert points == {"train_loss": 20}, points  # metrics.csv: a row every 10 steps
    results = json.loads((long.path / "results.json").read_text())
    config = page.split("Resolved config", 1)[1]
    assert f"{project}: git {commit} (uncommitted changes)" in page and "python train.py --steps 200" in page
    assert f"<td>final_loss</td><td>{results['final_loss']:.4g}</td>" in page, page
    assert "--steps" in config and not any(word in config for word in TASK_VALUES), config

    assert cli.main(["compare", str(long.path), str(short.path)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    rows = {key: line.split()[1:] for key, line in lines.items()}
    assert rows["code"][0] == f"{commit[:10]}+dirty" and rows["steps"] == ["200", "*", "40"], lines
    assert '"--steps", "200"]' in lines["command"] and '"--steps", "40"]' in lines["command"], lines
    assert rows["final_loss"][0] == f"{results['final_loss']:.4g}" and "trainer.max_epochs" not in rows

    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    row = next(r for r in table.run_rows(here=True) if r["run"] == "long")
    last = (long.path / "metrics.csv").read_text().splitlines()[-1].split(",")
    assert (row["state"], row["progress"], row["last"]) == ("COMPLETED", "step 200",
                                                           f"train_loss={float(last[1]):.4g}"), row
    assert cli.main(["status", str(long.path)]) == 0
    said = capsys.readouterr().out
    assert f"result: world_size 1, steps 200, initial_loss {results['initial_loss']:.4g}, final_loss " in said, said
