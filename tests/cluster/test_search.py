"""Hyperparameter search on the real test cluster: experiments/searches/demo_lr_wd.yaml (12 seeded TPE trials over the
demo's learning rate and weight decay, median pruner) at 3 at once on Slurm, its driver killed with SIGKILL mid-study
and started again; the best trial rerun; a 4-trial study on the LSF stand-in through the Python API. The demo is
shrunk to a few batches an epoch (its four epochs kept: the pruner compares epochs)."""
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import forked
import pytest
import yaml
from conftest import ROOT, run_cluster

import cluster_train as ct
from cluster_train.host.runs import segments
from cluster_train.host.search import objective, record

pytestmark = [pytest.mark.image, pytest.mark.slurm, pytest.mark.slow]
SEARCH = ROOT / "experiments" / "searches" / "demo_lr_wd.yaml"
# 16 of the demo's 47 batches an epoch: an epoch long enough for the driver's 2 s look to see a trial between its
# epochs; the whole validation set (750 images): epochs' accuracies seldom tie with the median
SMALL = ["--set", "data.num_workers=0", "--set", "trainer.limit_train_batches=16"]


def finished(study_dir: Path) -> int:
    return record.progress(study_dir)["finished"] if (study_dir / record.TRIALS).is_file() else 0


@pytest.fixture(scope="module")
def study(cpu_image, slurm_cluster, demo_data, tmp_path_factory):
    """The 12-trial study, its first driver killed once 4 trials have finished, then resumed to the end:
    (study directory, the environment its commands ran in, what the first driver and the resumed one printed)."""
    runs = tmp_path_factory.mktemp("search-runs")
    env = {**os.environ, "CT_RUNS_DIR": str(runs)}
    study_dir = runs / "study"
    with tempfile.TemporaryFile() as out:
        pid = forked.start(["ci-slurm", "n1_gpu1", "demo", "--search", SEARCH, "--max-parallel", "3",
                            "--set", f"data.root={demo_data}", *SMALL, "--run-id", "study"], out.fileno(),
                           out.fileno(), env)
        deadline = time.monotonic() + 600
        while finished(study_dir) < 4 and time.monotonic() < deadline and not os.waitpid(pid, os.WNOHANG)[0]:
            time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)  # a laptop closed, a login session gone: no chance to clean up
        os.waitpid(pid, 0)
        out.seek(0)
        first = out.read().decode()
    assert 4 <= finished(study_dir) < 12, first[-3000:]
    assert record.driver_holder(study_dir) == ""
    resumed = run_cluster("resume", study_dir, env=env, timeout=900)
    assert resumed.returncode == 0, first[-2000:] + resumed.stdout[-3000:] + resumed.stderr
    return study_dir, env, first + resumed.stdout


def test_a_killed_driver_resumes_and_the_study_ends_with_12_trials_none_repeated(study):
    study_dir, _, said = study
    trials = record.read_trials(study_dir)
    assert sorted(t["number"] for t in trials) == list(range(12)), said[-3000:]
    assert {t["state"] for t in trials} <= {"COMPLETE", "PRUNED"}, [(t["number"], t["ended"]) for t in trials]
    assert len({json.dumps(t["params"], sort_keys=True) for t in trials}) == 12  # no trial asked twice
    queued = sorted(study_dir.glob("batch-*/e*/manifest.json"))
    assert len(queued) == 12 and len({t["job_id"] for t in trials}) == 12  # none queued twice
    for t in trials:
        manifest = json.loads((Path(t["run_dir"]) / "manifest.json").read_text())
        assert t["number"] in manifest["study"]["trials"] and manifest["image"]["sha256"]
        assert manifest["sweep"]["values"] == t["params"]


def test_a_pruned_trial_stopped_below_the_median_and_its_job_was_cancelled(study):
    study_dir, _, said = study
    pruned = [t for t in record.read_trials(study_dir) if t["state"] == "PRUNED"]
    assert pruned, said[-3000:]
    for t in pruned:
        at = t["pruned"]
        assert at["value"] < at["median"] and at["of_trials"] >= 3, at  # maximize: below the finished trials' median
        assert json.loads((Path(t["run_dir"]) / "pruned.json").read_text()) == at
        assert f"trial {t['number']} pruned after epoch {at['epoch']}" in said
        assert segments.cancel_of(Path(t["run_dir"]), t["job_id"])  # recorded as a cancel, then asked of Slurm
        assert sorted(map(int, t["steps"])) == list(range(at["epoch"] + 1)) and at["epoch"] < 3  # before its last
    status = run_cluster("status", pruned[0]["run_dir"], env=study[1])
    assert f"cause: pruned by study study (trial {pruned[0]['number']}) after epoch" in status.stdout, status.stdout


def test_the_best_trials_rerun_reproduces_its_objective_bit_for_bit(study):
    study_dir, env, _ = study
    best = record.progress(study_dir)["best"]
    done = run_cluster("--rerun", best["run_dir"], "--run-id", "best-again", "--wait", env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    again = Path(env["CT_RUNS_DIR"]) / "best-again"
    assert objective.final(again, "val/acc", 4) == best["value"]
    assert (again / "metrics.csv").read_text() == (Path(best["run_dir"]) / "metrics.csv").read_text()


def test_status_and_runs_show_the_study_its_progress_and_best_trial(study):
    study_dir, env, _ = study
    best = record.progress(study_dir)["best"]
    status = run_cluster("status", study_dir, env=env)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].startswith("study study: COMPLETED, 12 of 12 trials finished (")
    assert f"best val/acc {best['value']:.6g} (trial {best['number']})" in lines[0]
    assert sum(line.split()[1:2] in (["COMPLETE"], ["PRUNED"]) for line in lines) == 12
    table = run_cluster("runs", "--here", env=env)
    row = next(line for line in table.stdout.splitlines() if line.split()[1:2] == ["study"])
    assert "COMPLETED" in row and "12/12 trials" in row and f"(trial {best['number']})" in row


def test_what_the_search_knows_classify_logs_is_what_a_trial_wrote(study):
    study_dir, _, _ = study
    complete = next(t for t in record.read_trials(study_dir) if t["state"] == "COMPLETE")
    run_dir = Path(complete["run_dir"])
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    results = json.loads((run_dir / "results.json").read_text())
    assert set(objective.LOGGED["classify"]["metrics.csv"]) <= set(header)
    assert set(objective.LOGGED["classify"]["results.json"]) <= set(results)


def test_a_four_trial_study_on_the_lsf_stand_in_through_the_python_api(cpu_image, cluster_nodes, demo_data, lsf_path,
                                                                      runs_dir, capsys):
    """Job.search with the search as a mapping (the Slurm study above goes through the command line and a file)."""
    search = {**yaml.safe_load(SEARCH.read_text()), "trials": 4}
    overrides = [f"data.root={demo_data}", *SMALL[1::2], "trainer.max_epochs=1"]
    job = ct.Job("ci-lsf", "one_gpu", "demo", overrides=overrides, run_id="lsf")
    study = job.search(search, max_parallel=4, timeout_s=600)
    assert capsys.readouterr() == ("", "")  # the library printed nothing
    trials = study.trials()
    assert study.path == runs_dir / "lsf" and study.status()["finished"] == 4, trials
    assert {t["state"] for t in trials} <= {"COMPLETE", "PRUNED"}, trials
    assert all(json.loads((Path(t["run_dir"]) / "manifest.json").read_text())["scheduler"]["name"] == "lsf"
               for t in trials)
    assert study.best_run().path == Path(study.best()["run_dir"])
    assert study.best_run().status().state == "COMPLETED"


def test_the_study_report_opens_in_headless_chromium_with_its_plots(study, tmp_path):
    from tests.host.test_report import check_in_browser

    study_dir, env, _ = study
    done = run_cluster("report", study_dir, env=env)
    assert done.returncode == 0, done.stderr
    page = (study_dir / "report.html").read_text()
    best = record.progress(study_dir)["best"]
    assert f"batch-{Path(best['run_dir']).parent.name.split('-')[1]}/{Path(best['run_dir']).name}/report.html" in page
    assert "PRUNED" in page and "median" in page
    check_in_browser(study_dir / "report.html", tmp_path, expect_images=4, expect_tables=3)
