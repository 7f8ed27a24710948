"""One Apptainer adapter on the host side (issue 40): whichever command needs Apptainer, a missing one and one
older than the project needs are refused with the same one line, before anything runs."""
import os
from pathlib import Path

import pytest

from conftest import run_cluster
from cluster_train.shared.errors import UserError
from cluster_train.host import apptainer
from cluster_train.host.data import transport
from cluster_train.host.doctor import apptainer as doctor_checks
from cluster_train.host.images import oci, signing, sif

CALLERS = {
    "inspect": lambda tmp: sif.sif_labels(tmp / "x.sif", "the image"),
    "verify": lambda tmp: signing.signers_of(tmp / "x.sif"),
    "pull": lambda tmp: oci.pull("oras://localhost:5000/x/y:1", True, tmp),
    "sif": lambda tmp: transport.sif("list", str(tmp / "x.sif")),
}


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH that holds the usual tools but no apptainer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def fake_apptainer(bin_dir: Path, version: str) -> Path:
    """An apptainer that says its version and records any other call (none may reach it)."""
    calls = bin_dir / "calls"
    script = bin_dir / "apptainer"
    script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "apptainer version {version}"; exit 0; fi\n'
                      f'echo "$@" >> {calls}\nexit 0\n')
    script.chmod(0o755)
    return calls


@pytest.mark.parametrize("verb", sorted(CALLERS))
def test_a_missing_apptainer_is_said_once_the_same_way(bare_path, verb):
    with pytest.raises(UserError) as err:
        CALLERS[verb](bare_path)
    assert str(err.value) == apptainer.missing() and "\n" not in str(err.value)


@pytest.mark.parametrize("verb", sorted(CALLERS))
def test_a_too_old_apptainer_is_refused_before_it_runs(bare_path, verb):
    calls = fake_apptainer(bare_path, "1.0.0")
    with pytest.raises(UserError) as err:
        CALLERS[verb](bare_path)
    assert str(err.value) == apptainer.too_old("apptainer version 1.0.0")
    assert "1.1.0 or newer" in str(err.value) and "\n" not in str(err.value)
    assert not calls.exists()


def test_a_new_enough_apptainer_is_used(bare_path):
    calls = fake_apptainer(bare_path, "1.4.5-2")
    assert apptainer.problem() == ""
    assert apptainer.sif("list", "x.sif").returncode == 0
    assert calls.read_text() == "sif list x.sif\n"


def test_the_path_searched_is_the_one_given(bare_path, monkeypatch):
    """doctor looks for Apptainer on the PATH a job has (after the cluster's modules), not on its own."""
    fake_apptainer(bare_path, "1.3.0")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert apptainer.problem(str(bare_path)) == "" and apptainer.problem() == apptainer.missing()


@pytest.mark.parametrize("old", [False, True], ids=["missing", "too-old"])
def test_the_cli_says_it_in_one_line_and_pulls_nothing(bare_path, old):
    """The real CLI, with the PATH a login node without (a new enough) Apptainer has: images and data alike."""
    if old:
        fake_apptainer(bare_path, "1.0.0")
    said = apptainer.too_old("apptainer version 1.0.0") if old else apptainer.missing()
    for command in (["images", "pull"], ["data", "pull", "--name", "x"]):
        done = run_cluster(*command, "oras://localhost:1/x/y:1", env={**os.environ, "PATH": str(bare_path)})
        assert (done.returncode, done.stderr) == (2, f"run-cluster: error: {said}\n")
    assert not (bare_path / "calls").exists()


def test_doctor_calls_a_too_old_apptainer_a_problem_in_the_same_words(bare_path):
    """doctor looks on the PATH a job has; a 1.0 apptainer there was 'ok', and every image command then failed."""
    fake_apptainer(bare_path, "1.0.0")
    tools = doctor_checks.Tools.find(str(bare_path))
    found = doctor_checks.check_apptainer(tools)
    assert (tools.exe, found.state) == ("", "problem")
    assert found.what == apptainer.too_old("apptainer version 1.0.0")
    assert list(doctor_checks.checks(tools)) == [found]  # nothing else asks a binary that cannot serve
