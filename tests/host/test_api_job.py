"""Job, its sweep and rerun() on this machine's `local` cluster with its submission stood in (nothing trains): what
they write and return, every problem at once, nothing printed, nothing left behind by a refusal."""
import json

import pytest
import yaml

import cluster_train as ct


@pytest.fixture
def queued(store, monkeypatch):
    """Every local submission answers job 4242 at once, running nothing."""
    from cluster_train.host.schedulers import SCHEDULERS

    monkeypatch.setattr(SCHEDULERS["local"], "submit", lambda script, run_dir: "4242")
    return store / "runs"


def test_submit_writes_the_run_and_returns_its_run_printing_nothing(queued, capsys):
    job = ct.Job("local", "cpu_1proc", "demo", overrides={"trainer.max_epochs": 3, "optim.lr": "0.5"},
                 run_id="api", stale_image_ok=True)
    run = job.submit()
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert run.path == queued / "api" and manifest["scheduler"]["job_id"] == "4242"
    assert manifest["overrides"] == ["trainer.max_epochs=3", "optim.lr=0.5"]
    again = ct.rerun(run, {"trainer.max_epochs": 4}, run_id="again")
    assert json.loads((again.path / "manifest.json").read_text())["rerun_of"] == "api"
    assert capsys.readouterr() == ("", "")


# wandb_project: a task parameter of any type (NOT_LITERAL), the free-form key; name: a str key
AS_STRINGS = {"name": "007", "task_params.wandb_project": "007"}


def test_python_strings_reach_config_yaml_as_strings_and_set_types_them_by_the_schema(queued, capsys, tmp_path):
    """Issue 57's acceptance: the API's str values arrive in config.yaml as those strings, through a submission, a
    rerun with a mapping (Run.rerun) reading its manifest's text form, and a sweep; --set of the same keys types them
    by the schema (a str key keeps its text, a free-form key reads it as YAML)."""
    def config(run) -> tuple:
        found = yaml.safe_load((run.path / "config.yaml").read_text())
        return found["name"], found["task_params"]["wandb_project"]

    (tmp_path / "experts").mkdir()
    fusion = {"task": "cifar_fusion", "task_params.experts_dir": str(tmp_path / "experts")}
    run = ct.Job("local", "cpu_1proc", "demo", overrides={**fusion, **AS_STRINGS}, run_id="typed",
                 stale_image_ok=True).submit()
    assert config(run) == ("007", "007")
    again = run.rerun({"trainer.max_epochs": 2})  # a mapping, as Job takes one
    assert config(again) == ("007", "007")
    swept = ct.Job("local", "cpu_1proc", "demo", overrides=fusion, stale_image_ok=True).sweep(
        {"task_params.wandb_project": ["007", "yes"]})
    assert [config(ct.Run(swept.path / e))[1] for e in ("e0", "e1")] == ["007", "yes"]
    lines = [f"{key}={value}" for key, value in {**fusion, **AS_STRINGS}.items()]
    by_set = ct.Job("local", "cpu_1proc", "demo", overrides=lines, run_id="by-set", stale_image_ok=True).submit()
    assert config(by_set) == ("007", 7)  # as --set task_params.wandb_project=007 means: YAML's 7
    assert capsys.readouterr() == ("", "")


def test_a_rerun_checks_and_dry_runs_as_a_job_and_submits_as_rerun_does(queued, capsys):
    first = ct.Job("local", "cpu_1proc", "demo", run_id="first", stale_image_ok=True).submit()
    again = ct.Job.rerun_of(first, {"trainer.max_epochs": 4}, run_id="again")
    dry = again.dry_run()
    assert again.check() == [] and dry.config["trainer"]["max_epochs"] == 4 and "/again" in dry.script
    assert [p.name for p in queued.iterdir()] == ["first"], "a check and a dry run write nothing"
    assert again.submit().path == queued / "again" and first.rerun().path.parent == queued
    assert capsys.readouterr() == ("", "")


def test_a_sweep_returns_one_run_per_combination(queued):
    swept = ct.Job("local", "cpu_1proc", "demo", run_id="sw", stale_image_ok=True).sweep(
        {"optim.lr": [0.1, 0.01], "model.params.width": [4]}, max_parallel=1)
    assert swept.path == queued / "sw" and [r.path.name for r in swept.runs] == ["e0", "e1"]
    values = [json.loads((r.path / "manifest.json").read_text())["sweep"]["values"] for r in swept.runs]
    assert values == [{"optim.lr": "0.1", "model.params.width": "4"}, {"optim.lr": "0.01", "model.params.width": "4"}]


def test_check_gives_every_problem_at_once_and_submit_raises_them_writing_nothing(queued):
    job = ct.Job("local", "cpu_1proc", "demo", overrides=["trainer.max_epochs=-1", "optim.lr=fast"])
    problems = job.check()
    assert len(problems) == 2 and any("trainer.max_epochs" in p for p in problems), problems
    with pytest.raises(ct.ClusterTrainError) as refused:
        job.submit()
    assert refused.value.problems == problems and list(queued.iterdir()) == []
    with pytest.raises(ct.ClusterTrainError, match="overrides 'a=1' is one string"):
        ct.Job("local", "cpu_1proc", overrides="a=1")
    with pytest.raises(ct.ClusterTrainError, match="must map each key to a list of values"):
        ct.Job("local", "cpu_1proc", "demo").sweep({"optim.lr": 0.1})
    with pytest.raises(ct.ClusterTrainError, match="--max-parallel caps a sweep"):
        ct.Job("local", "cpu_1proc", "demo")._plan(dry_run=True, max_parallel=2)
