"""The suite's own closing report (tests/suite_report.py), on a throwaway suite run by pytest in a child process: a skip
not allowed by name fails the run under CT_NO_SKIPS=1, an allowed one does not, and the time table lists the set-up
steps `make test` timed, pytest's whole run and its slowest tests, after the notes a test left."""
import os
import subprocess
import sys

from conftest import ROOT

SUITE = "import pytest\n\ndef test_passes():\n    pass\n\ndef test_skips():\n    pytest.skip('not here')\n"
NOTE = "import suite_report\n\ndef test_counts():\n    suite_report.NOTES['docs blocks'] = ['3 run for real']\n"


def run_suite(folder, *args, **env):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_report", "-p", "no:cacheprovider",
                           *args, "tests"], cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tests"), "CT_NO_SKIPS": "", **env})


def test_a_skip_fails_the_run_unless_allowed_by_name_and_the_time_table_closes_it(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_anything.py").write_text(SUITE)
    (tmp_path / "tests" / "test_notes.py").write_text(NOTE)  # a section a test asked for, before the time table
    (tmp_path / "times").write_text("installs: Apptainer, Slurm 12\nhost venv and CPU image, side by side 345\n")
    failed = run_suite(tmp_path, CT_NO_SKIPS="1", CT_TIMES=str(tmp_path / "times"))
    assert failed.returncode == 1, failed.stdout
    assert "tests/test_anything.py::test_skips: not here -> NOT ALLOWED" in failed.stdout, failed.stdout
    assert "1 skip(s) not allowed by name: the run fails" in failed.stdout
    notes, table = failed.stdout.split("where the time went", 1)
    assert "docs blocks" in notes.split("3 run for real")[0].splitlines()[-1], notes
    for row in ("12.0 s  installs: Apptainer, Slurm", "345.0 s  host venv and CPU image, side by side",
                "s  pytest, whole run", "s    tests/test_anything.py::test_passes"):
        assert row in table, table
    assert run_suite(tmp_path).returncode == 0  # outside make test a skip is reported, not a failure
    (tmp_path / "tests" / "image").mkdir()
    (tmp_path / "tests" / "test_anything.py").rename(tmp_path / "tests" / "image" / "test_experiment_sizes.py")
    allowed = run_suite(tmp_path, CT_NO_SKIPS="1")
    assert allowed.returncode == 0 and "allowed: torchvision is only in the image" in allowed.stdout, allowed.stdout


def test_under_two_xdist_workers_the_notes_and_skips_of_a_worker_reach_the_report(tmp_path):
    """make test runs two pytest-xdist workers: a worker's notes and phases reach the controller's report, and its
    skips are judged there."""
    (tmp_path / "tests" / "image").mkdir(parents=True)
    (tmp_path / "tests" / "test_notes.py").write_text(NOTE.replace("import suite_report\n", "import suite_report\n"
                                                                   "suite_report.PHASES['a phase'] = 7\n"))
    (tmp_path / "tests" / "image" / "test_experiment_sizes.py").write_text(
        "import pytest\n\ndef test_skips():\n    pytest.skip('not here')\n")
    done = run_suite(tmp_path, "-n", "2", CT_NO_SKIPS="1")
    assert done.returncode == 0 and "allowed: torchvision is only in the image" in done.stdout, done.stdout
    notes, table = done.stdout.split("where the time went", 1)
    assert "3 run for real" in notes and "7.0 s  a phase" in table, done.stdout
    assert "s    tests/image/test_experiment_sizes.py::test_skips\n" in table, table
