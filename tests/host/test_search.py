"""--search without a cluster: the search file checked whole, each bad input one line before anything is written, the
study's first batch split as a sweep is, the storage's password never written, a trial's epochs read from a real
metrics.csv's layout. The real studies: tests/cluster/test_search.py."""
import json

import pytest
from conftest import ROOT

import cluster_train as ct
from cluster_train.host import cli
from cluster_train.host.settings import search_storage_setting
from cluster_train.host.search import objective, optuna_study, spec, storage
from cluster_train.shared.errors import UserError

GOOD = {"space": {"optim.lr": {"log_uniform": [1.0e-4, 1.0]}}, "objective": {"metric": "val/acc",
                                                                          "direction": "maximize"}, "trials": 4}


@pytest.mark.parametrize("change, says", [
    ({"space": {}}, "the space is empty"),
    ({"space": {"optim.lr": {"uniform": [0.5, 0.1]}}}, "uniform low 0.5 is not below high 0.1"),
    ({"space": {"optim.lr": {"log_uniform": [0, 0.1]}}}, "log_uniform low 0 must be above 0"),
    ({"space": {"optim.lr": {"normal": [0, 1]}}}, "is not one of log_uniform, uniform, int, choice"),
    ({"space": {"model.params.width": {"int": [4, 8.5]}}}, "int [4, 8.5] must be [low, high], two finite integers"),
    ({"space": {"optim.name": {"choice": ["sgd", "sgd"]}}}, "must list distinct values"),
    ({"objective": {"metric": "val/acc", "direction": "up"}}, "direction 'up' must be maximize or minimize"),
    ({"trials": 0}, "trials 0 must be a whole number of trials"),
    ({"sampler": "grid"}, "sampler 'grid' is not one of tpe, random"),
    ({"pruner": {"median": {"patience": 3}}}, "median: patience: 3 is not one of its whole-number settings"),
    ({"budget": 3}, "unknown key 'budget'"),
])
def test_a_bad_search_file_is_one_line_naming_the_value(change, says):
    with pytest.raises(UserError, match=None) as err:
        spec.read_spec({**GOOD, **change}, "--search s.yaml")
    assert len(err.value.lines) == 1 and says in err.value.lines[0], err.value.lines


def search_file(tmp_path, **change):
    path = tmp_path / "search.yaml"
    path.write_text(json.dumps({**GOOD, **change}))  # JSON is YAML
    return str(path)


@pytest.mark.parametrize("change, says", [
    ({"space": {"optim.nosuch": {"uniform": [0, 1]}}}, "unknown config key 'optim.nosuch'"),
    ({"space": {"optim.lr": {"uniform": [-1.0, 0.1]}}}, "--search space optim.lr=-1.0: config key 'optim.lr'"),
    ({"space": {"model.name": {"choice": ["resnet_cifar", "nosuch"]}}}, "--search space model.name=nosuch: unknown"),
    ({"objective": {"metric": "val/f1", "direction": "maximize"}}, "objective metric 'val/f1' is not logged by task "
                                                                   "classify; name one of val/acc, val/loss"),
])
def test_a_study_the_config_refuses_is_refused_before_anything_is_written(store, capsys, tmp_path, change, says):
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", "--search", search_file(tmp_path, **change), "--run-id", "s"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert list((store / "runs").iterdir()) == []


def test_search_takes_an_experiment_and_no_sweep(store, capsys, tmp_path):
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", "--search", search_file(tmp_path), "--sweep", "optim.lr=1,2"]) == 2
    assert "--search queues its own trials; drop --sweep" in capsys.readouterr().err
    assert cli.main(["ci-slurm", "n1_gpu1", "--search", search_file(tmp_path), "--", "python", "x.py"]) == 2
    assert "your own command logs no metric it knows" in capsys.readouterr().err


def test_a_batch_larger_than_the_array_limit_is_split_as_a_sweep_is(store, capsys, tmp_path):
    small = tmp_path / "small.yaml"
    small.write_text((ROOT / "clusters" / "ci-slurm.yaml").read_text() + "max_array_size: 2\n")
    assert cli.main([str(small), "n1_gpu1", "demo", "--search", search_file(tmp_path), "--max-parallel", "3",
                     "--dry-run", "--run-id", "s"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("study s: 4 trials, TPE sampler (seed 42), no pruner, maximize val/acc, at most 3 at once")
    assert "--- sweep script 1 of 2: e0-e1 (dry run" in out and "--- sweep script 2 of 2: e2-e2, after the array" in out
    assert "cost: at most 1.33 GPU-hours (time 00:20:00 x 1 GPU(s) x 4 runs)" in out
    assert list((store / "runs").iterdir()) == []


def test_the_api_refuses_what_the_command_line_refuses(store):
    with pytest.raises(ct.ClusterTrainError, match="the space is empty"):
        ct.Job("ci-slurm", "n1_gpu1", "demo").search({**GOOD, "space": {}})
    with pytest.raises(ct.ClusterTrainError, match="is not a study's directory"):
        ct.Study(store / "runs")


def test_the_storage_password_comes_from_its_variable_and_is_never_written(tmp_path, monkeypatch):
    setting = {"url": "postgresql://me@db.example.edu:5432/optuna", "password_env": "OPTUNA_PG_PASSWORD"}
    search_storage_setting.check(setting, "settings")
    with pytest.raises(UserError, match="is not postgresql://USER@HOST"):
        search_storage_setting.check({**setting, "url": "postgresql://me:secret@db/optuna"}, "settings")
    recorded = {"storage": storage.storage_of({"search_storage": setting}, tmp_path)}
    assert recorded["storage"] == setting  # what study.json holds
    with pytest.raises(UserError, match=r"\$OPTUNA_PG_PASSWORD, which is not set here"):
        optuna_study.storage_url(recorded)
    monkeypatch.setenv("OPTUNA_PG_PASSWORD", "p@ss/word")
    assert optuna_study.storage_url(recorded) == "postgresql://me:p%40ss%2Fword@db.example.edu:5432/optuna"
    assert storage.storage_of({}, tmp_path) == {"url": f"sqlite:///{tmp_path.resolve() / 'study.db'}"}


def test_an_epoch_counts_once_its_end_is_written_and_the_validations_around_training_do_not(tmp_path):
    """Lightning's layout (a real trial's metrics.csv): the validation before training is logged as epoch 0, the one
    after training as epoch max_epochs."""
    (tmp_path / "metrics.csv").write_text("epoch,step,train/acc,train/loss,val/acc,val/loss\n0,0,,,0.006,4.6\n"
                                          "0,3,,,0.01,4.6\n1,4,0.01,4.6,,\n1,7,,,0.012,4.59\n")
    assert objective.intermediate(tmp_path, "val/acc", 2, ended=False) == [(0, 0.01)]
    with (tmp_path / "metrics.csv").open("a") as f:
        f.write("2,8,,,0.02,4.5\n")
    assert objective.intermediate(tmp_path, "val/acc", 2, ended=True) == [(0, 0.01), (1, 0.012)]
    assert objective.final(tmp_path, "val/acc", 2) == 0.012
    (tmp_path / "results.json").write_text(json.dumps({"final_val_acc": 0.5}))
    assert objective.final(tmp_path, "final_val_acc", 2) == 0.5
