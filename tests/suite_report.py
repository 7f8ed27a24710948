"""Two things `make test` reports at its end (a plugin conftest.py registers):

- Skips. A test skipped in CI proves nothing, so under `CT_NO_SKIPS=1` (make test sets it) a skip fails the run
  unless ALLOWED_SKIPS names it, with the reason the same check runs elsewhere. Every skip is listed (-rs).
- Where the time went: the set-up steps `make test` timed before pytest (CT_TIMES, "name seconds" per line), the
  Slurm cluster's start, the CUDA image's build or key check, pytest's whole run, when each worker's last test ended
  (the run waits on the later one) and its ten slowest tests.
- What a test asked to be shown (NOTES): the docs test's counts of blocks run for real, as --dry-run and not run.
"""
import fnmatch
import os
import time
from collections import defaultdict

import pytest

# nodeid pattern -> why the skip is not a hole: the same test runs elsewhere in the suite
IN_IMAGE = "torchvision is only in the image: test_in_image.py runs this module there"
ALLOWED_SKIPS = {"tests/image/test_models.py::*[[]vgg]": IN_IMAGE,
                 "tests/image/test_models.py::*[[]mobilenet*]": IN_IMAGE,
                 "tests/image/test_models.py::*[[]efficientnet]": IN_IMAGE,
                 "tests/image/test_experiment_sizes.py::*": IN_IMAGE}
PHASES = {}  # name -> seconds, measured by fixtures (the Slurm cluster's start)
NOTES = {}  # section title -> its lines, printed at the end (tests/cluster/test_docs_commands.py's counts)
_durations = defaultdict(float)
_done_at = {}  # xdist worker -> seconds into the run its last test ended: which worker the run waited on
_skips = {}
_started = time.time()


def allowed(nodeid: str) -> str:
    return next((why for pattern, why in ALLOWED_SKIPS.items() if fnmatch.fnmatch(nodeid, pattern)), "")


def pytest_runtest_logreport(report):
    _durations[report.nodeid] += report.duration
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is not None:
        _done_at[worker.id] = time.time() - _started
    if report.skipped:
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skips[report.nodeid] = why.removeprefix("Skipped: ")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's controller, as each worker ends
def pytest_testnodedown(node, error):
    shown = getattr(node, "workeroutput", {}).get("suite_report", {})
    PHASES.update(shown.get("phases", {}))
    NOTES.update(shown.get("notes", {}))


def unexpected_skips() -> dict:
    return {nodeid: why for nodeid, why in _skips.items() if not allowed(nodeid)}


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: its phases and notes go to the controller
        session.config.workeroutput["suite_report"] = {"phases": PHASES, "notes": NOTES}
    if os.environ.get("CT_NO_SKIPS") == "1" and unexpected_skips() and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    if _skips:
        terminalreporter.section("skips")
        for nodeid, why in sorted(_skips.items()):
            verdict = f"allowed: {allowed(nodeid)}" if allowed(nodeid) else "NOT ALLOWED (tests/suite_report.py)"
            write(f"{nodeid}: {why} -> {verdict}")
        if os.environ.get("CT_NO_SKIPS") == "1" and unexpected_skips():
            write(f"{len(unexpected_skips())} skip(s) not allowed by name: the run fails")
    for title, lines in NOTES.items():
        terminalreporter.section(title)
        for line in lines:
            write(line)
    terminalreporter.section("where the time went")
    rows = [*_setup_times(), *PHASES.items(), ("pytest, whole run", time.time() - _started)]
    rows += [(f"  worker {worker}'s last test ended", s) for worker, s in sorted(_done_at.items())]
    rows += [("  the real components' tests, one worker's, in all", _real_components_s())]
    rows += [(f"  {nodeid}", s) for nodeid, s in sorted(_durations.items(), key=lambda kv: -kv[1])[:10]]
    for name, seconds in rows:
        write(f"{seconds:8.1f} s  {name}")
    if os.environ.get("CT_TIMES"):  # every test's time beside the setup's, for finding what to make cheaper
        with open(f"{os.environ['CT_TIMES']}.tests", "w") as out:
            out.writelines(f"{s:8.1f} {nodeid}\n" for nodeid, s in sorted(_durations.items(), key=lambda kv: -kv[1]))


def _real_components_s() -> float:
    """The one worker's share the scheduler cannot move (tests/conftest.py): what the two workers' ends are set by."""
    from conftest import worker_group  # the tests' conftest, on the path pytest gives this plugin

    return sum(s for nodeid, s in _durations.items() if worker_group(nodeid) == "real-components")


def _setup_times():
    path = os.environ.get("CT_TIMES", "")
    if not path or not os.path.isfile(path):
        return []
    with open(path) as lines:
        return [(name, float(s)) for name, s in (line.rsplit(None, 1) for line in lines if line.strip())]
