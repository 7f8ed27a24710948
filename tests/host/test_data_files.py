"""The files each data set needs under data.root (cluster_train/host/jobs/data_files.py), held to what its generator
writes in the loader's real format; an empty data folder is refused before queueing (its submission:
tests/bad_inputs/paths.yaml) and only warned about on a dry run."""
import pytest

from conftest import run_cluster
from cluster_train.shared import config as cfg
from cluster_train.shared.data import DATASETS, GENERATORS
from cluster_train.host.jobs import data_files

pytest.importorskip("torch")  # the generators live beside their loaders

TINY = {"cifar100": {"train_per_class": 1, "test_per_class": 1},
        "ufc10": {"train_per_class": 1, "val_per_class": 1, "test_per_class": 1, "frames": 2, "size": 8},
        "planner_scenes": {"train_samples": 2, "val_samples": 1, "vocab_size": 4},
        "motion_tokens": {"train_scenes": 2, "val_scenes": 1, "agents": 2, "steps": 2, "bins": 3}}


def test_every_data_set_names_the_files_it_needs():
    assert sorted(data_files.NEEDS) == sorted(DATASETS.names()) == sorted(TINY)


@pytest.mark.parametrize("name", sorted(TINY))
def test_what_a_generator_writes_passes_and_an_empty_folder_does_not(tmp_path, name):
    run = cfg.resolve({"data": {"name": name, "root": str(tmp_path / "set")}})
    (tmp_path / "set").mkdir()
    [empty] = data_files.problems([run])
    assert str(empty) == (f"data.root: {tmp_path / 'set'} lacks {', '.join(data_files.NEEDS[name])}, which data set "
                          f"{name!r} reads; put the data there (the generated data sets: make data) or fix data.root")
    GENERATORS.build(name, root=tmp_path / "set", **TINY[name])
    assert data_files.problems([run]) == []


def test_a_dry_run_warns_of_an_empty_data_folder_and_a_submission_is_refused(store, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = ["local", "cpu_1proc", "demo", "--set", f"data.root={empty}", "--stale-image-ok"]
    dry = run_cluster(*args, "--dry-run")
    assert dry.returncode == 0 and f"warning: data.root: {empty} lacks cifar-100-python/train" in dry.stderr
    done = run_cluster(*args, "--no-wait")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"error: data.root: {empty} lacks cifar-100-python/train, cifar-100-python/test" in done.stderr
    assert not any((store / "runs").iterdir())  # nothing queued
