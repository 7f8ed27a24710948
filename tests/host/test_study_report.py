"""`run-cluster report` of a study (--search): a real Optuna study made here in its real formats (study.json, the
SQLite storage, trials.json the driver writes, trial run directories in batch-N/eK), no cluster; the page opened in
headless Chromium, and made again without Optuna as on a login node's plain python3."""
import json
import re
import sys

import matplotlib
import optuna
import pytest

from cluster_train.host.reports.report import write_report
from tests.host.test_report import check_in_browser, fake_run, images_of

SPACE = {"optim.lr": {"log_uniform": [1e-4, 1.0]}, "optim.weight_decay": {"uniform": [0.0, 0.01]}}
# (state, the value after each epoch); the final value of a complete trial is its last epoch's
TRIALS = [("COMPLETE", [0.20, 0.35, 0.42]), ("COMPLETE", [0.30, 0.50, 0.61]), ("PRUNED", [0.10, 0.15]),
          ("COMPLETE", [0.25, 0.40, 0.55]), ("FAIL", []), ("COMPLETE", [0.22, 0.38, 0.48])]
BEST = 1
WITH_RUN_DIR = (1, 2)  # the best trial and the pruned one have run directories here; the others' are elsewhere


def make_study(study_dir, trials=TRIALS):
    """study.json, study.db with every trial asked, reported and told as the driver does, trials.json, and the run
    directories of WITH_RUN_DIR."""
    study_dir.mkdir()
    url = f"sqlite:///{study_dir / 'study.db'}"
    record = {"study_id": "study-demo", "cluster": "local", "profile": "cpu_1proc", "experiment": "demo",
              "overrides": ["trainer.max_epochs=3"], "max_parallel": 3, "task": "classify", "max_epochs": 3,
              "spec": {"space": SPACE, "objective": {"metric": "val/acc", "direction": "maximize"},
                       "trials": len(trials), "sampler": {"random": {"seed": 7}}, "pruner": {"median": {}}},
              "storage": {"url": url}, "batches": [{"dir": "batch-0", "trials": [0, 1, 2]},
                                                   {"dir": "batch-1", "trials": [3, 4, 5]}]}
    (study_dir / "study.json").write_text(json.dumps(record, indent=2))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="study-demo", storage=url, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=7))
    spaces = {"optim.lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True),
              "optim.weight_decay": optuna.distributions.FloatDistribution(0.0, 0.01)}
    rows = []
    for number, (state, steps) in enumerate(trials):
        trial = study.ask(spaces)
        for epoch, value in enumerate(steps):
            trial.report(value, epoch)
        run_dir = study_dir / f"batch-{number // 3}" / f"e{number % 3}"
        if number in WITH_RUN_DIR:
            fake_run(run_dir.parent, run_dir.name, lr=trial.params["optim.lr"], results=state == "COMPLETE")
        pruned = {"epoch": len(steps) - 1, "value": steps[-1], "median": 0.375, "of_trials": 2, "metric": "val/acc",
                  "study": "study-demo", "trial": number} if state == "PRUNED" else None
        study.tell(trial, steps[-1] if state == "COMPLETE" else None, state=getattr(optuna.trial.TrialState, state))
        rows.append({"number": number, "state": state, "params": {k: repr(v) for k, v in trial.params.items()},
                     "value": steps[-1] if state == "COMPLETE" else None, "run_dir": str(run_dir),
                     "job_id": f"4242_{number}", "steps": {str(e): v for e, v in enumerate(steps)}, "pruned": pruned,
                     "ended": "FAILED (exit 1): CUDA out of memory" if state == "FAIL" else None})
    (study_dir / "trials.json").write_text(json.dumps(rows, indent=2))
    return study_dir


@pytest.fixture
def study_dir(tmp_path):
    return make_study(tmp_path / "study-demo")


def trial_rows(page: str) -> dict:
    """The trials table: trial number -> its cells (the last one the run link's HTML)."""
    table = page[page.index('<table class="trials">'):]
    table = table[:table.index("</table>")]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)]
    return {int(cells[0]): cells[1:] for cells in rows if cells}


def check_table_and_best(page: str, study_dir) -> None:
    rows = trial_rows(page)
    assert sorted(rows) == list(range(len(TRIALS)))
    assert [rows[n][0] for n in sorted(rows)] == [state for state, _ in TRIALS]
    assert rows[BEST][3] == "0.61" and rows[BEST][4] == "3"  # value, epochs reported
    assert rows[2][3] == "pruned after epoch 1: 0.15, median 0.375 of 2 trials" and rows[2][4] == "2"
    assert rows[4][3] == "FAILED (exit 1): CUDA out of memory"
    best = page[page.index("<h2>Best trial</h2>"):page.index("<h2>Plots</h2>")]
    assert "<th>trial</th><td>1</td>" in best and "<th>val/acc</th><td>0.61</td>" in best
    lr = json.loads((study_dir / "trials.json").read_text())[BEST]["params"]["optim.lr"]
    assert f"<th>optim.lr</th><td>{lr}</td>" in best
    assert f"run-cluster local cpu_1proc demo --set trainer.max_epochs=3 --set optim.lr={lr}" in best
    links = re.findall(r'<a href="([^"]+)"', page)
    assert links == ["batch-0/e1/report.html", "batch-0/e1/report.html", "batch-0/e2/report.html"]  # best, table
    for href in links:
        assert (study_dir / href).is_file(), href  # each trial's own run report, written with the study's
    assert '">batch-1/e0</td>' in page  # a run directory not here (yet): its path, not a link


@pytest.mark.slow  # headless Chromium: in make test, not make test-fast
def test_study_report_shows_the_best_trial_optunas_plots_and_every_trial(study_dir, tmp_path):
    style = (matplotlib.rcParams["axes.prop_cycle"], matplotlib.rcParams["axes.facecolor"])
    out = write_report(study_dir)
    assert out == study_dir / "report.html"
    page = out.read_text()
    check_table_and_best(page, study_dir)
    images = images_of(page)  # every plot an embedded PNG
    assert sorted(images) == [1, 2, 3, 4] and all(i.width > 500 and i.height > 400 for i in images.values())
    for alt in ("objective over trials", "parameter importances", "parallel coordinates", "intermediate values"):
        assert f'alt="{alt}' in page, alt
    assert "no plot" not in page and "importances by PED-ANOVA" in page
    assert "<script" not in page.replace('<script type="application/json"', "")  # a static page
    assert (matplotlib.rcParams["axes.prop_cycle"], matplotlib.rcParams["axes.facecolor"]) == style  # not ggplot
    check_in_browser(out, tmp_path, expect_images=4, expect_tables=3)


def test_importances_of_one_completed_trial_are_a_note_and_the_other_plots_are_drawn(tmp_path):
    """Parameter importances need two completed trials: with one, Optuna 5 draws all zeros; the page says why it
    has no such plot instead."""
    make_study(tmp_path / "study-demo", [TRIALS[0], TRIALS[2]])
    page = write_report(tmp_path / "study-demo").read_text()
    assert len(images_of(page)) == 3
    assert ('<p class="note">no plot of parameter importances: it needs two completed trials or more (1 so far)</p>'
            in page)


def test_without_optuna_the_page_still_has_the_best_trial_and_the_table(study_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError: a login node's python3
    page = write_report(study_dir).read_text()
    check_table_and_best(page, study_dir)
    assert "<img " not in page
    assert ("no plots: optuna is not installed here; python3 -m pip install --user &#x27;optuna&gt;=4&#x27; "
            "matplotlib") in page


def test_a_storage_that_cannot_be_read_is_one_line_where_the_plots_would_be(study_dir, monkeypatch):
    """A PostgreSQL storage whose password variable is not set here: the rest of the page is made."""
    record = json.loads((study_dir / "study.json").read_text())
    record["storage"] = {"url": "postgresql://optuna@db.example/studies", "password_env": "STUDY_DB_PASSWORD"}
    (study_dir / "study.json").write_text(json.dumps(record))
    monkeypatch.delenv("STUDY_DB_PASSWORD", raising=False)
    page = write_report(study_dir).read_text()
    check_table_and_best(page, study_dir)
    assert ('<p class="note">no plots: the study storage cannot be read: the study&#x27;s storage takes its password '
            'from $STUDY_DB_PASSWORD, which is not set here; export it</p>') in page
