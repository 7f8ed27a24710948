import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import forked
import pytest
import suite_report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLUSTER_SH = ROOT / "tests" / "slurm" / "cluster.sh"


def pytest_configure(config):
    config.pluginmanager.register(suite_report, "suite_report")  # skips that fail the run; where the time went
    # here, not in pyproject.toml: that file is an input of every image, and a marker is no reason to rebuild them
    config.addinivalue_line("markers",
                            "registry: needs Debian's docker-registry (make registry); not in make test-fast")
    config.addinivalue_line("markers", "cuda_image: builds the CUDA 12.8 image beside the other tests (minutes)")
    config.addinivalue_line("markers", "image_copy: test_in_image.py runs this module again inside the image, where "
                                       "jobs run; make test runs only that copy, make test-fast the host one "
                                       "unless slow")
    config.addinivalue_line("markers", "after_min_job_age: checks jobs after the test cluster has forgotten them: "
                                       "runs at the session's end, waiting only for what of MinJobAge is left")


@pytest.hookimpl(trylast=True)  # after -m/-k deselected what the run does not select
def pytest_collection_modifyitems(session, config, items):
    """The CUDA image's test goes last; before it, the tests that check jobs once the test cluster has forgotten them
    (their jobs, and the CUDA build where one is needed, start with the first real-component test: early_jobs); before
    those, the tests of `make demo`'s run, whose input-wait check wants the host tests of the other worker done."""
    real_components_on_their_side(items)
    cuda = [item for item in items if item.get_closest_marker("cuda_image")]
    late = [item for item in items if item.get_closest_marker("after_min_job_age")]
    demo = [item for item in items if {"made_demo", "demo_run"} & set(item.fixturenames) and item not in late + cuda]
    items[:] = [item for item in items if item not in cuda + late + demo] + demo + late + cuda


# `make test` runs two pytest-xdist workers. One runs every test of the shared real components in order: the test
# Slurm cluster of four nodes (and the sshd, MLflow relay and fixtures its tests share), the registry, the CUDA build,
# `make demo`'s run. They wait on the cluster far more than they compute. The other runs the rest meanwhile, a module
# at a time (so module fixtures run once): the host tests, and the image's own tests, which run apptainer on this
# machine and read the image store, never write it. The controller sees only test ids, so the split is by path; the
# collection checks that every test of the real components is on that side.
REAL_PATHS = ("tests/cluster/", "tests/image/test_cuda_image.py")
BESIDE = ("tests/cluster/test_lsf_requeue.py", "tests/cluster/test_lsf_standin.py",  # each test its own LSF state
          "tests/cluster/test_resume_runs.py")  # the local scheduler
# Tests of the LSF stand-in in those modules that use the cluster's nodes (cluster_nodes), never Slurm: they run
# beside, a group of their own, while the real components' worker waits on the cluster
LSF_BESIDE = ("tests/cluster/test_api_examples.py::test_the_seed_sweep_example_on_lsf_",
              "tests/cluster/test_api_examples.py::test_the_seed001_pipeline_example_on_lsf_",
              "tests/cluster/test_api_examples.py::test_the_function_example_on_lsf_",
              "tests/cluster/test_hangs.py::test_the_lsf_watchdog_",
              "tests/cluster/test_launch_shapes.py::test_lsf_shapes_through_the_standin",
              "tests/cluster/test_search.py::test_a_four_trial_study_on_the_lsf_stand_in")
REAL_MARKS = ("slurm", "registry", "cuda_image")
REAL_FIXTURES = {"slurm_cluster", "made_demo", "demo_run", "cancelled_runs", "oci_registry", "mlflow_for_nodes",
                 "login_node"}


def worker_group(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    if nodeid.startswith(LSF_BESIDE):
        return "lsf-stand-in"
    return "real-components" if module.startswith(REAL_PATHS) and module not in BESIDE else module


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's controller: its scheduler, grouping tests by worker_group
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkerGroup(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # once, before the first unit goes out: xdist sorted the queue by test count
                self.ordered = True
                ordered = sorted(self.workqueue.items(), key=lambda unit: queue_rank(unit[0]))  # stable: keeps that
                self.workqueue.clear()
                self.workqueue.update(ordered)
            super()._assign_work_unit(node)

    return ByWorkerGroup(config, log)


def queue_rank(scope: str) -> int:
    """The real components first, then the image's modules (a few take minutes each), the host's many short ones
    last: whichever worker is free takes the next, so the run's tail is made of short modules, not one of minutes
    that starts when the other worker is nearly done (CI of 1aeed7c: one worker idle for the last 574 s)."""
    return (0 if scope == "real-components" else 1 if scope.startswith("tests/image/")
            else 2 if scope.startswith(("tests/cluster/", "lsf-stand-in")) else 3)


def real_components_on_their_side(items) -> None:
    uses = [item.nodeid for item in items if worker_group(item.nodeid) != "real-components" and (
        REAL_FIXTURES & set(item.fixturenames) or not item.nodeid.startswith(LSF_BESIDE) and any(
            item.get_closest_marker(mark) for mark in REAL_MARKS))]  # LSF_BESIDE: their modules' marks
    if uses:
        raise pytest.UsageError(f"{uses[0]} uses the shared test cluster, registry or make demo's run outside "
                                f"{', '.join(REAL_PATHS)}: move it there, or add its module to REAL_PATHS "
                                "(tests/conftest.py)")


def sha256(path) -> str:
    """What `sha256sum` prints: computed here independently of
    cluster_train.host.images.store, which the tests check."""
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout
    return out.split()[0]


# Input directories the experiment files name by default, by the data set each holds: preflight refuses a run whose
# inputs do not exist or lack the data set's files (cluster_train/host/jobs/data_files.py), so the tests that submit
# without a data.root of their own need them. `make data` fills them with real sets; where it has not, each gets empty
# stand-ins of the files its data set needs (nothing trains on these), removed again after the session.
DEFAULT_INPUTS = {ROOT / "data" / name: data_set for name, data_set in (
    ("cifar100-synthetic", "cifar100"), ("ufc10-synthetic", "ufc10"), ("cifar100", "cifar100"),
    ("navsim-synthetic", "planner_scenes"), ("smart-synthetic", "motion_tokens"))}


def squashfs_stand_in(path: Path) -> Path:
    """A data image's stand-in of fixed bytes (so a fixed digest): a SquashFS superblock's magic and a recorded size
    (bytes 40-48) equal to the file's, all that a submission reads of it; nothing mounts it."""
    path.write_bytes(b"hsqs" + bytes(36) + (96).to_bytes(8, "little") + bytes(48))
    return path


def stand_in_data(root: Path, data_set: str = "cifar100") -> Path:
    """Empty files where a data set's loader reads (data_files.NEEDS): enough for preflight; nothing trains on them."""
    from cluster_train.host.jobs.data_files import NEEDS

    for name in NEEDS[data_set]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


def make_default_inputs() -> list:
    """The stand-ins DEFAULT_INPUTS needs where no real set is: the files and directories made, each after the
    directory that holds it."""
    from cluster_train.host.jobs.data_files import NEEDS

    made = []
    for root, data_set in DEFAULT_INPUTS.items():
        files = [root / name for name in NEEDS[data_set]]
        if any(path.exists() for path in files):  # real data (make data), or this checkout's own stand-ins
            continue
        try:
            for path in files:
                for parent in reversed([*path.relative_to(ROOT).parents][:-1]):
                    if not (ROOT / parent).exists():
                        (ROOT / parent).mkdir()
                        made.append(ROOT / parent)
                path.touch()
                made.append(path)
        except OSError:  # a read-only checkout (the tests that run inside the image)
            pass
    return made


def remove_default_inputs(made: list) -> None:
    for path in reversed(made):
        try:
            path.rmdir() if path.is_dir() else path.unlink()
        except OSError:  # filled meanwhile (make data): keep it
            pass


# Made and removed by the one process that sees the whole session (a plain run, or pytest-xdist's controller, whose
# session starts before its workers' and ends after them), never by a worker that ends while others still read them.
# So is the test Slurm cluster's stop: a worker starts it when a test first needs it (cluster_up), and both workers
# use its nodes (the LSF stand-in's hosts are its namespaces), so it stops when the whole session ends.
def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        session.config.stash[MADE_INPUTS] = make_default_inputs()
        # this session's own (a pytest run inside a test has another): the workers inherit it
        os.environ["CT_SUITE_DIR"] = tempfile.mkdtemp(prefix="ct-suite-")


def pytest_sessionfinish(session, exitstatus):
    remove_default_inputs(session.config.stash.get(MADE_INPUTS, []))
    if not hasattr(session.config, "workerinput") and os.environ.get("CT_SUITE_DIR"):
        suite = Path(os.environ.pop("CT_SUITE_DIR"))
        if (suite / CLUSTER_STARTED).exists():
            subprocess.run(["bash", str(CLUSTER_SH), "stop"], check=True)
        shutil.rmtree(suite, ignore_errors=True)


MADE_INPUTS = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def cpu_image():
    """The built CPU image's record; `make test` builds it before pytest starts (a test never builds it)."""
    from cluster_train.host.images import store as image_store

    record = image_store.current("cpu", ROOT / "images")
    if record is None:
        pytest.fail("no CPU image has been built: run `make image` first (make test does)")
    return record


@pytest.fixture
def stop_handlers_restored():
    """For a test that installs cluster_train/image/stop.py's handlers (a Trainer, the resume helper) in pytest's own
    process: pytest's handlers come back after it."""
    import signal

    from cluster_train.image import stop

    saved = {sig: signal.getsignal(sig) for sig in stop.SIGNALS}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    stop.reset()


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory):
    """A small generated CIFAR-100-format set, shared by the end-to-end tests."""
    from cluster_train.image.data.cifar100 import generate_cifar100

    return generate_cifar100(tmp_path_factory.mktemp("cifar100"), train_per_class=10, test_per_class=3)


@pytest.fixture(scope="session")
def slurm_cluster():
    """The real test Slurm cluster (tests/slurm/cluster.sh), started if it is not already up."""
    cluster_up()


@pytest.fixture(scope="session")
def cluster_nodes():
    """The test cluster's nodes n1-n4 (network namespaces, names in /etc/hosts), which the LSF stand-in's hosts are
    too; its tests use them, not Slurm, and so run beside the real components (LSF_BESIDE)."""
    cluster_up()


CLUSTER_STARTED = "slurm-cluster-started"  # in $CT_SUITE_DIR: this session started the cluster, and stops it


def cluster_up() -> None:
    """Start the test cluster unless it is up, once for both workers (a lock); the session stops what it started."""
    suite = Path(os.environ["CT_SUITE_DIR"])
    with (suite / "cluster.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if subprocess.run(["bash", str(CLUSTER_SH), "status"], capture_output=True).returncode != 0:
            started = time.time()
            subprocess.run(["bash", str(CLUSTER_SH), "start"], check=True)
            suite_report.PHASES["Slurm test cluster start"] = time.time() - started
            (suite / CLUSTER_STARTED).touch()


@pytest.fixture(scope="session")
def cancelled_runs(slurm_cluster, cpu_image, tmp_path_factory):
    """The runs of tests/cancel_scenarios.py, cancelled by a process of their own started with the session: their
    directory (runs/, driver.log, cancelled.json once all are cancelled) and that process."""
    base = tmp_path_factory.mktemp("cancelled")
    with (base / "driver.log").open("w") as log:
        driver = subprocess.Popen([sys.executable, str(ROOT / "tests" / "cancel_scenarios.py"), str(base)],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    yield base, driver
    driver.kill()
    driver.wait()
    jobs = [json.loads(p.read_text())["scheduler"]["job_id"] for p in base.glob("runs/**/manifest.json")]
    subprocess.run(["scancel", *jobs], capture_output=True)  # whatever a failed test left queued


EARLY = {"started": False}


@pytest.fixture(autouse=True)
def early_jobs(request):
    """What runs beside the session starts with its first real-component test (under xdist, in the one worker that
    runs them): the jobs whose last checks wait for the scheduler to forget them, when a test that checks them is
    selected, and the CUDA image's build, when its test is selected and its inputs changed since the last build that
    passed its %test."""
    if EARLY["started"] or worker_group(request.node.nodeid) != "real-components":
        return
    EARLY["started"] = True
    items = request.session.items
    if any(item.get_closest_marker("cuda_image") for item in items):
        from image.test_cuda_image import build_needed, start_build

        if build_needed():
            start_build()
    if any("cancelled_runs" in getattr(item, "fixturenames", ()) for item in items):
        try:
            request.getfixturevalue("cancelled_runs")
        except (Exception, pytest.fail.Exception):  # no image or no cluster: the tests that use it say so, not all
            pass


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server on 127.0.0.1 (the host venv's mlflow) with a SQLite store in a temporary
    directory; its "http://127.0.0.1:PORT". It takes ~16 s to answer: a test calls mlflow_up(url) where it first
    needs it, so the requeued trainings (which log offline) run meanwhile."""
    import socket

    pytest.importorskip("mlflow", reason="the host venv has no mlflow: make venv (tests/requirements.txt)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tmp_path_factory.mktemp("mlflow")
    with (tmp / "log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                                 "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
                                 "--default-artifact-root", str(tmp / "artifacts")],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    MLFLOW_SERVERS[url] = (proc, tmp / "log")
    yield url
    os.killpg(proc.pid, 15)  # its own session: the server's uvicorn workers go with it
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:  # a busy machine: its workers still finishing after 20 s
        os.killpg(proc.pid, 9)
        proc.wait(20)


MLFLOW_SERVERS = {}  # url -> (process, log file)


def mlflow_up(url: str, timeout_s: float = 90) -> str:
    """`url` once the mlflow_server fixture's server answers."""
    import urllib.request

    proc, log = MLFLOW_SERVERS[url]
    deadline = time.time() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1)
            return url
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                pytest.fail(f"the MLflow server did not answer on {url}: {log.read_text()[-2000:]}")
            time.sleep(0.2)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A stand-in image store (tiny files recorded as cpu, cuda11.6 and cuda12.8 images), settings, empty runs dir."""
    from cluster_train.host.images import store as image_store

    root = tmp_path / "images"
    for flavor in ("cpu", "cuda11.6", "cuda12.8"):
        sif = tmp_path / f"{flavor}.sif"
        sif.write_text(f"stand-in {flavor} image\n")
        image_store.record(flavor, sif, ROOT / "pyproject.toml", ROOT / "pyproject.toml", root=root)
    (tmp_path / "settings.yaml").write_text("clusters:\n  gilbreth: {account: lusu}\n")
    monkeypatch.setenv("CT_IMAGES", str(root))
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "runs").mkdir()
    return tmp_path


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    path = tmp_path / "runs"
    path.mkdir()
    monkeypatch.setenv("CT_RUNS_DIR", str(path))
    return path


def ctrl_c_as_at_a_terminal() -> None:
    """A Popen preexec_fn for a child the test will Ctrl-C (SIGINT): a suite started in the background of a shell
    without job control (`nohup make test &`) hands its children SIGINT ignored, and Python then never raises
    KeyboardInterrupt."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cluster(*args, env=None, cwd=None, timeout=900):
    """`bin/run-cluster ARGS` in a process of its own, forked from this one (tests/forked.py), as subprocess.run with
    capture_output and text returns it."""
    return forked.run_cluster(*args, env=env, cwd=cwd, timeout=timeout)


def only_run(runs: Path) -> Path:
    found = [p for p in runs.iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return found[0]


def wait_for_slurm_job(job_id: str, timeout_s: float = 600) -> str:
    """Poll scontrol until the job ends; every wait has a timeout (a job Slurm cannot place pends forever)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
        state = next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "UNKNOWN")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(1)
    subprocess.run(["scancel", job_id])
    raise AssertionError(f"slurm job {job_id} did not finish in {timeout_s} s")


_PENDING_SINCE = {}


def release_requeued(job_id: str, settle_s: float = 5) -> None:
    """Slurm holds a requeued job 120 s before it may start again (BeginTime): let it start sooner (test speed only),
    but not before its last run has been cleaned up on its node (released at once, its launch failed there)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    if "JobState=PENDING" not in out or "Reason=BeginTime" not in out:
        _PENDING_SINCE.pop(job_id, None)
        return
    since = _PENDING_SINCE.setdefault(job_id, time.time())
    if time.time() - since >= settle_s:
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)
        _PENDING_SINCE.pop(job_id, None)


def job_logs(run_dir: Path) -> str:
    """Every segment's scheduler log of a run, in order."""
    return "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*.out")))


def assert_same_tensors(a: Path, b: Path) -> None:
    """Two weight files (a checkpoint's state_dict or exported weights) hold equal tensors, bit for bit."""
    import torch

    wa, wb = (torch.load(p, map_location="cpu", weights_only=True) for p in (a, b))
    wa, wb = (w.get("state_dict", w) for w in (wa, wb))
    assert wa.keys() == wb.keys(), a
    assert [k for k in wa if not torch.equal(wa[k], wb[k])] == [], a


def assert_same_run(whole: Path, cut: Path) -> None:
    """An interrupted run's output directory ended as an uninterrupted one's: results, metrics rows, last weights."""
    a, b = (json.loads((d / "results.json").read_text()) for d in (whole, cut))
    for key in ("initial_val_loss", "final_val_loss", "final_val_acc", "best_val_loss", "epochs"):
        assert a[key] == b[key], key
    assert (whole / "metrics.csv").read_text() == (cut / "metrics.csv").read_text()
    assert_same_tensors(whole / "checkpoints" / "last.ckpt", cut / "checkpoints" / "last.ckpt")


def wait_for_run(predicate, what: str, timeout_s: float, run_dir: Path, job_id: str = ""):
    """predicate()'s first true value, polled each second; a requeued job held by Slurm's BeginTime is released."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        if job_id:
            release_requeued(job_id)
        time.sleep(1)
    record = run_dir / "logs" / "segments.jsonl"
    ended = record.read_text() if record.is_file() else "(no segments.jsonl)"
    raise AssertionError(f"{what}: not within {timeout_s} s; {ended}\n{job_logs(run_dir)[-3000:]}")


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def stop_sh_run(cluster, profile: str, run_id: str, where: Path, runs: Path) -> tuple:
    """A run of tests/cancel_scenarios.py's stop.sh (trains nothing: runs until signalled) from `where`/code, queued
    --no-wait on CLUSTER's PROFILE: its run directory and job id."""
    from cancel_scenarios import STOP_SH

    (where / "code").mkdir()
    (where / "code" / "stop.sh").write_text(STOP_SH)
    done = run_cluster(cluster, profile, "--run-id", run_id, "--no-wait", "--stale-image-ok", "--", "bash", "stop.sh",
                       cwd=where / "code")
    assert done.returncode == 0, done.stdout + done.stderr
    return runs / run_id, manifest(runs / run_id)["scheduler"]["job_id"]


def wandb_records(run_dir: Path) -> list:
    """The records of a W&B run directory's log as W&B's own reader gives them (`wandb leet inspect`, wandb-core's:
    it checks every chunk's crc and the block layout)."""
    done = subprocess.run([str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--json", str(run_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]
