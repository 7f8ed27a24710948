"""What a user runs after submitting, end to end on the real components: `logs --follow`, `--sweep-file`, `compare`
and a sweep's `report` on runs that really trained on the test Slurm cluster (one 2-element sweep shared by them),
`cancel` of a Slurm job, an LSF job (the stand-in) and a sweep's array (three long jobs queued together).
`make demo` from a clean clone is tests/cluster/test_demo.py."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import forked
import pytest
from conftest import ROOT, job_logs, manifest, run_cluster, wait_for_slurm_job
from host.test_report import check_curves, check_in_browser, csv_points, curve_points, drawn, images_of

from cluster_train.host.runs import segments

STARTED = "[cluster-train] rank 0/1 on host"  # the training's first line: it runs


def demo_args(demo_data, epochs: int, *more: str) -> list:
    return ["demo", "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
            "--set", f"trainer.max_epochs={epochs}", *more, "--no-wait"]


def env_with(**values) -> dict:
    return {**os.environ, **{k: str(v) for k, v in values.items()}}


# ---- one real 2-element sweep from a --sweep-file: logs --follow, the sweep itself, compare, report ----------------

@pytest.fixture(scope="module")
def sweep_file_runs(cpu_image, slurm_cluster, demo_data, tmp_path_factory):
    """A --sweep-file of two runs (different keys set in each), queued on ci-slurm; its directory and environment."""
    tmp = tmp_path_factory.mktemp("sweep-file")
    env = env_with(CT_RUNS_DIR=tmp / "runs")
    (tmp / "runs.yaml").write_text("- {optim.lr: 0.05, model.params.width: 4}\n- {optim.lr: 0.1}\n")
    done = run_cluster("ci-slurm", "n1_gpu1", *demo_args(demo_data, 1, "--set", "trainer.limit_train_batches=4",
                                                         "--set", "trainer.limit_val_batches=2",
                                                         "--set", "trainer.log_every_n_steps=2"),
                       "--sweep-file", tmp / "runs.yaml", "--run-id", "sf", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    sweep_dir = tmp / "runs" / "sf"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    yield sweep_dir, record, env
    subprocess.run(["scancel", record["array_job_id"]], capture_output=True)


@pytest.fixture(scope="module")
def sweep_file_done(sweep_file_runs):
    sweep_dir, record, env = sweep_file_runs
    states = [wait_for_slurm_job(e["job_id"], 300) for e in record["elements"]]
    assert states == ["COMPLETED"] * 2, (states, [job_logs(Path(e["run_dir"]))[-2000:] for e in record["elements"]])
    return sweep_dir, record, env


@pytest.mark.image
@pytest.mark.slurm
def test_logs_follow_streams_a_running_job_and_returns_when_it_ends(sweep_file_runs):
    """Lines reach the terminal while the job runs, all of the log is printed, and it returns soon after the end."""
    sweep_dir, record, env = sweep_file_runs
    run_dir = Path(record["elements"][0]["run_dir"])
    with open(sweep_dir.parent / "follow.out", "w+b") as out, open(sweep_dir.parent / "follow.err", "w+b") as err:
        pid = forked.start(["logs", "--follow", str(run_dir)], out.fileno(), err.fileno(), env)
        started, ended_at, printed_by_end, returned_at, rc = time.time(), None, None, None, None
        while time.time() - started < 300:
            if ended_at is None and segments.read(run_dir) and segments.read(run_dir)[-1].how:
                ended_at, printed_by_end = time.time(), (sweep_dir.parent / "follow.out").read_text()
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                returned_at, rc = time.time(), os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.2)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        printed = (sweep_dir.parent / "follow.out").read_text()
        err.seek(0)
        errors = err.read().decode(errors="replace")
    log = job_logs(run_dir)
    assert returned_at is not None, f"logs --follow still running 300 s after it started; printed:\n{printed[-2000:]}"
    assert rc == 0, errors
    assert ended_at is not None and returned_at >= ended_at, f"returned before the job ended: {printed[-2000:]}"
    print(f"logs --follow returned {returned_at - ended_at:.1f} s after the job recorded its end")
    assert returned_at - ended_at < 15
    assert STARTED in log and log in printed, (log[-2000:], printed[-2000:])  # every line of the log
    # while it ran: the batch shell's first line (the training's own may come and end between two polls: a 4-batch
    # epoch takes a second, a poll under load several)
    assert "[cluster-train] job " in printed_by_end, printed_by_end


@pytest.mark.image
@pytest.mark.slurm
def test_a_script_waits_for_the_real_sweep_and_reads_each_runs_results_metrics_and_logs(sweep_file_runs, monkeypatch):
    """The Python API (cluster_train/host/api/run.py) on the sweep the tests above watch: each element waited for as a
    run, then the sweep; what each made read back; `runs()` lists them as `run-cluster runs` does."""
    from cluster_train.host.api.run import Run, State, runs

    sweep_dir, record, env = sweep_file_runs
    monkeypatch.setenv("CT_RUNS_DIR", env["CT_RUNS_DIR"])
    sweep = Run(sweep_dir)
    for run, element in zip(sweep.runs, record["elements"]):
        status = run.wait(timeout=300)
        assert (status.state, status.scheduler, status.job_id) == (State.COMPLETED, "slurm", element["job_id"]), \
            run.logs()[-3000:]
        assert run.results()["epochs"] == 1 and run.results() == status.results
        validated = [row for row in run.metrics() if "val/loss" in row]
        assert validated and isinstance(validated[-1]["val/loss"], float) and isinstance(validated[-1]["step"], int)
        assert STARTED in run.logs() and run.cluster == "ci-slurm"
    assert sweep.wait(timeout=60).state == State.COMPLETED and sweep.id == "sf"
    assert set(sweep.runs) <= set(runs(cluster="ci-slurm", state=State.COMPLETED))


@pytest.mark.image
@pytest.mark.slurm
def test_a_script_submits_on_lsf_waits_for_the_run_and_reads_it(cpu_image, slurm_cluster, demo_data, tmp_path,
                                                                 monkeypatch):
    """On the LSF stand-in: queued by the internal path (build, queue), then only the API: wait, results, metrics,
    logs, and cancel of the ended run, which keeps how it ended."""
    from cluster_train.host.api.run import Run, State
    from cluster_train.host.jobs.build import Request, Site, build
    from cluster_train.host.runs.queue import queue

    for name, value in (("CT_RUNS_DIR", tmp_path / "runs"), ("CT_LSF_STATE", tmp_path / "lsf"),
                        ("PATH", f"{ROOT / 'tests' / 'lsf'}:{os.environ['PATH']}")):
        monkeypatch.setenv(name, str(value))
    overrides = [f"data.root={demo_data}", "data.num_workers=0", "trainer.max_epochs=1",
                 "trainer.limit_train_batches=4", "trainer.limit_val_batches=2", "trainer.log_every_n_steps=2"]
    sub = build(Site.load("ci-lsf"), Request("one_gpu", "demo", overrides, run_id="api-lsf"))
    queue(sub)
    run = Run("api-lsf")
    status = run.wait(timeout=300, poll_s=0.5)
    assert (status.state, status.scheduler, status.ended) == (State.COMPLETED, "lsf", True), run.logs()[-3000:]
    assert run.results()["world_size"] == 1 and run.results()["epochs"] == 1
    assert any(isinstance(row.get("val/acc"), float) for row in run.metrics())
    assert STARTED in run.logs()
    assert run.cancel().endswith(f"({run.id}) has ended: COMPLETED; nothing to cancel")


@pytest.mark.image
@pytest.mark.slurm
def test_a_sweep_file_runs_each_listed_run_as_one_slurm_array(sweep_file_done):
    """Each listed mapping is one element of one array, trained with its values; status is one table."""
    sweep_dir, record, env = sweep_file_done
    assert "#SBATCH --array=0-1%2" in (sweep_dir / "sweep.sh").read_text()
    assert [e["job_id"] for e in record["elements"]] == [f"{record['array_job_id']}_{i}" for i in range(2)]
    e0, e1 = (manifest(Path(e["run_dir"])) for e in record["elements"])
    assert e0["config"]["optim"]["lr"] == 0.05 and e0["config"]["model"]["params"]["width"] == 4
    assert e1["config"]["optim"]["lr"] == 0.1 and e1["config"]["model"]["params"]["width"] == 16  # the experiment's
    for e in record["elements"]:
        results = json.loads((Path(e["run_dir"]) / "results.json").read_text())
        assert results["world_size"] == 1 and results["epochs"] == 1, results
    table = run_cluster("status", sweep_dir, env=env).stdout
    assert re.search(r"^e0 +0\.05 +4 +COMPLETED +1 +[\d.]+ +best_", table, re.M), table
    assert re.search(r"^e1 +0\.1 +- +COMPLETED +1 +[\d.]+ +best_", table, re.M), table


@pytest.mark.image
@pytest.mark.slurm
def test_compare_two_real_runs(sweep_file_done, cpu_image):
    """The differing keys, the image that ran, the code version and each metric, the best one marked."""
    sweep_dir, record, env = sweep_file_done
    dirs = [Path(e["run_dir"]) for e in record["elements"]]
    done = run_cluster("compare", *dirs, env=env)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line.strip() and line[0] != "-"}
    m = [manifest(d) for d in dirs]
    assert rows["run"] == [m[0]["run_id"], m[1]["run_id"]]
    assert rows["image"] == ["cpu", cpu_image.sha256[:12]] * 2
    code = m[0]["git"]["commit"][:10] + ("+dirty" if m[0]["git"]["dirty"] else "")
    assert rows["code"] == [code, code]
    assert rows["optim.lr"] == ["0.05", "0.1"] and rows["model.params.width"] == ["4", "16"]
    assert "trainer.max_epochs" not in rows and "output_dir" not in rows  # the same in both / each run's own
    losses = [json.loads((d / "results.json").read_text())["final_val_loss"] for d in dirs]
    expected = []
    for loss, other in zip(losses, reversed(losses)):
        expected += [f"{loss:.4g}"] + (["*"] if loss < other else [])
    assert rows["final_val_loss"] == expected, done.stdout


@pytest.mark.image
@pytest.mark.slurm
def test_report_of_a_real_sweep_ranks_its_runs_and_overlays_their_curves(sweep_file_done, cpu_image):
    """report runs/<sweep-id>: the elements best first, the keys that differ, every run's curves from its own CSV."""
    sweep_dir, record, env = sweep_file_done
    made = run_cluster("report", sweep_dir, env=env, timeout=120)
    assert made.returncode == 0 and made.stdout.strip() == f"wrote {sweep_dir / 'report.html'}", made.stderr
    page = (sweep_dir / "report.html").read_text()
    metric, better = re.search(r"sorted by (\S+) \((lower|higher) is better\)", page).groups()
    assert metric.startswith(("best_val", "final_val")), metric
    values = {f"e{i}": json.loads((Path(e["run_dir"]) / "results.json").read_text())[metric]
              for i, e in enumerate(record["elements"])}
    runs_table = page[page.index('<table class="runs">'):]
    runs_table = runs_table[:runs_table.index("</table>")]
    assert re.findall(r"<td>(e\d)</td><td>COMPLETED</td>", runs_table) == \
        sorted(values, key=values.get, reverse=better == "higher")  # best first
    assert "<th>optim.lr</th>" in runs_table and "<th>model.params.width</th>" in runs_table
    assert f"cpu {cpu_image.sha256[:12]}" in runs_table
    images, points = images_of(page), curve_points(page)
    assert {p["image"] for p in points} == set(images)
    for p in points:  # every curve drew every value its run's CSV holds
        assert p["points"] == csv_points(sweep_dir / p["run"] / p["source"], p["column"]) > 0, p
    for column in ("train/loss", "val/loss"):  # each run's curve, overlaid
        assert {p["run"] for p in points if p["column"] == column} == {"e0", "e1"}, column
    assert all(drawn(image) > 20 for image in images.values())


@pytest.mark.image
@pytest.mark.slurm
def test_report_of_one_real_run_renders_in_headless_chromium(sweep_file_done, cpu_image, tmp_path):
    """report runs/<id> of a run that trained: its curves from its own CSV, its image, code and end, in a browser."""
    sweep_dir, record, env = sweep_file_done
    run_dir = Path(record["elements"][0]["run_dir"])
    made = run_cluster("report", run_dir, env=env, timeout=120)
    assert made.returncode == 0 and made.stdout.strip() == f"wrote {run_dir / 'report.html'}", made.stderr
    page = (run_dir / "report.html").read_text()
    points = check_curves(page, run_dir, expect_images=1)
    assert {"train/loss", "val/loss", "val/acc"} <= {p["column"] for p in points}
    for text in (cpu_image.sha256, manifest(run_dir)["git"]["commit"], "COMPLETED", "final_val_loss", "samples/s"):
        assert text in page, text
    check_in_browser(run_dir / "report.html", tmp_path, expect_images=1, expect_tables=5)


# ---- cancel: a Slurm job, an LSF job and a sweep's array, queued together, each cancelled while it trains -----------

def job_processes(variable: str, value: str) -> list:
    """Every process on this machine (all the test cluster's nodes) whose environment has VARIABLE=VALUE."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{variable}={value}".encode() in environ:
            found.append(f"{pid} {cmd}")
    return found


def slurm_queue(job_id: str) -> str:
    """What squeue still holds of the job (an array: of any element)."""
    return subprocess.run(["squeue", "-h", "-r", "-j", job_id, "-o", "%i %T"], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def long_jobs(cpu_image, slurm_cluster, demo_data, tmp_path_factory):
    """Three 50-epoch jobs queued back to back: ci-slurm, ci-lsf (the stand-in) and a 2-element sweep on ci-slurm
    at most one at a time (one element trains, one waits)."""
    tmp = tmp_path_factory.mktemp("cancel")
    env = env_with(CT_RUNS_DIR=tmp / "runs")
    lsf_env = env_with(CT_RUNS_DIR=tmp / "runs", PATH=f"{ROOT / 'tests' / 'lsf'}:{os.environ['PATH']}",
                       CT_LSF_STATE=tmp / "lsf", CT_LSF_TERMINATE_INTERVAL=3)  # SIGTERM to SIGKILL (test speed)
    jobs = {}
    for kind, cluster, more, job_env in (
            ("slurm", ["ci-slurm", "n1_gpu1"], [], env),
            ("lsf", ["ci-lsf", "one_gpu"], [], lsf_env),
            ("sweep", ["ci-slurm", "n1_gpu1"], ["--sweep", "optim.lr=0.05,0.1", "--max-parallel", "1"], env)):
        done = run_cluster(*cluster, *demo_args(demo_data, 50, *more), "--run-id", kind, env=job_env)
        assert done.returncode == 0, done.stdout + done.stderr
        run_dir = tmp / "runs" / kind
        if kind == "sweep":
            record = json.loads((run_dir / "sweep.json").read_text())
            jobs[kind] = dict(run_dir=run_dir, job_id=record["array_job_id"], env=env, variable="SLURM_ARRAY_JOB_ID",
                              training=[Path(record["elements"][0]["run_dir"])])
        else:
            jobs[kind] = dict(run_dir=run_dir, job_id=manifest(run_dir)["scheduler"]["job_id"], env=job_env,
                              variable="LSB_JOBID" if kind == "lsf" else "SLURM_JOB_ID", training=[run_dir])
    yield jobs
    subprocess.run(["scancel", jobs["slurm"]["job_id"], jobs["sweep"]["job_id"]], capture_output=True)
    subprocess.run(["bkill", jobs["lsf"]["job_id"]], capture_output=True, env=lsf_env)


def in_queue(kind: str, job: dict) -> str:
    if kind == "lsf":
        shown = subprocess.run(["bjobs", "-noheader", "-o", "stat", job["job_id"]], capture_output=True, text=True,
                               env=job["env"]).stdout
        return "" if set(shown.split()) <= {"DONE", "EXIT"} else shown
    return slurm_queue(job["job_id"])


@pytest.mark.image
@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["slurm", "lsf", "sweep"])
def test_cancel_ends_the_job_everywhere_and_status_says_cancelled(long_jobs, kind):
    """Nothing of it left in the queue nor on any node; status (each element's, for a sweep) says CANCELLED and
    names the cancel as the cause, not the ranks that saved and stopped on it."""
    job = long_jobs[kind]
    deadline = time.time() + 300
    while not all(STARTED in job_logs(d) for d in job["training"]):
        assert time.time() < deadline, f"no training started: {[job_logs(d)[-2000:] for d in job['training']]}"
        time.sleep(1)
    running = job_processes(job["variable"], job["job_id"])
    assert any(" -m train " in p for p in running), running  # the scan sees the job's training process
    assert in_queue(kind, job), "the job is not in the queue before the cancel"
    cancelled = run_cluster("cancel", job["run_dir"], env=job["env"])
    assert cancelled.returncode == 0 and "cancelled " in cancelled.stdout, cancelled.stdout + cancelled.stderr
    deadline, left = time.time() + 60, None
    while time.time() < deadline:
        left = (in_queue(kind, job), job_processes(job["variable"], job["job_id"]))
        if left == ("", []):
            break
        time.sleep(1)
    assert left == ("", []), f"60 s after the cancel, queued: {left[0]!r}, processes: {left[1]}"
    status = run_cluster("status", job["run_dir"], env=job["env"])
    assert status.returncode == 0, status.stderr
    if kind == "sweep":
        assert len(re.findall(r"^e[01] .* CANCELLED ", status.stdout, re.M)) == 2, status.stdout
    else:
        assert f"job {job['job_id']} CANCELLED" in status.stdout, status.stdout
    for run_dir in job["training"]:  # every rank saved and exited 75 as asked: the cause is the cancel, not a rank
        status = run_cluster("status", run_dir, env=job["env"]).stdout
        assert "cause: cancelled by bin/run-cluster cancel at " in status and "died" not in status, status
