"""Sweeps (`--sweep KEY=V1,V2`): every element checked before anything is queued, one job array, one run directory
per element. Fast tests here; the real arrays on the test Slurm cluster and the LSF stand-in at the end."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, manifest, run_cluster

from cluster_train.host import cli
from cluster_train.host.runs import sweep
from cluster_train.host.schedulers import SCHEDULERS, State

SWEEP = ["--sweep", "model.params.width=4,6,8", "--sweep", "optim.lr=0.05,0.1"]
TINY = ["--set", "trainer.max_epochs=1", "--set", "data.num_workers=0", "--set", "trainer.limit_train_batches=4"]


def test_the_product_of_the_values_last_key_fastest():
    axes = sweep.parse_axes(["model.name=a,b", "optim.lr=0.1,0.01,0.001"])
    settings = sweep.combinations(axes)
    assert len(settings) == 6
    assert settings[:2] == [{"model.name": "a", "optim.lr": "0.1"}, {"model.name": "a", "optim.lr": "0.01"}]


@pytest.mark.parametrize("spec", ["optim.lr", "=1,2", "optim.lr=1,,2", "optim.lr="])
def test_a_malformed_sweep_is_refused(spec):
    with pytest.raises(sweep.UserError, match="is not KEY=V1,V2"):
        sweep.parse_axes([spec])


def test_one_bad_value_refuses_the_whole_sweep_before_anything_is_written(store, capsys):
    status = cli.main(["ci-slurm", "n1_gpu1", "demo", "--sweep", "model.name=resnet_cifar,nosuchmodel",
                       "--sweep", "optim.lr=0.05,0.1", "--run-id", "sw"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and err[0].startswith("run-cluster: error: --sweep model.name=nosuchmodel: unknown "), err
    assert list((store / "runs").iterdir()) == []


def test_every_bad_value_is_reported_at_once(store, capsys):
    status = cli.main(["ci-slurm", "n1_gpu1", "demo", "--sweep", "optim.lr=0.1,nan,-1", "--dry-run"])
    err = capsys.readouterr().err
    assert status == 2 and "--sweep optim.lr=nan:" in err and "--sweep optim.lr=-1:" in err, err


def test_max_parallel_needs_a_sweep(store, capsys):
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", "--max-parallel", "2", "--dry-run"]) == 2
    assert "--max-parallel caps a sweep" in capsys.readouterr().err


def test_local_runs_as_many_at_once_as_the_machine_has_cpus_for(store, capsys, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert cli.main(["local", "cpu_1proc", "demo", *SWEEP, "--dry-run"]) == 0  # cpus_per_task: 2
    out = capsys.readouterr().out
    assert "at most 4 at once" in out and "xargs -0 -n 1 -P 4" in out


def test_array_scripts_pick_their_element_and_cap_it(store, capsys):
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", *SWEEP, "--max-parallel", "2", "--dry-run", "--run-id", "s"]) == 0
    slurm = capsys.readouterr().out
    assert "#SBATCH --array=0-5%2" in slurm and slurm.count("#SBATCH --output=") == 1
    assert 'RUN_DIR=${ct_runs[$(( SLURM_ARRAY_TASK_ID ))]}' in slurm
    assert cli.main(["ci-lsf", "one_gpu", "demo", *SWEEP, "--max-parallel", "2", "--dry-run", "--run-id", "s"]) == 0
    lsf = capsys.readouterr().out
    assert '#BSUB -J "demo[1-6]%2"' in lsf and "#BSUB -o " in lsf and "array_%J_%I.out" in lsf
    assert 'RUN_DIR=${ct_runs[$(( LSB_JOBINDEX - 1 ))]}' in lsf
    for script in (slurm, lsf):
        body = script.split("nothing submitted) ---\n", 1)[1]
        assert subprocess.run(["bash", "-n"], input=body, text=True).returncode == 0


def test_a_sweep_over_the_array_limit_is_split_into_arrays_that_fit_each_after_the_one_before(store, capsys,
                                                                                             tmp_path):
    small = tmp_path / "small.yaml"
    small.write_text((ROOT / "clusters" / "ci-slurm.yaml").read_text() + "max_array_size: 4\n")
    assert cli.main([str(small), "n1_gpu1", "demo", *SWEEP, "--max-parallel", "3", "--dry-run", "--run-id", "s"]) == 0
    out = capsys.readouterr().out
    assert "--- sweep script 1 of 2: e0-e3 (dry run" in out and "--- sweep script 2 of 2: e4-e5, after the array" in out
    first, second = out.split("--- sweep script ")[1:]
    assert "#SBATCH --array=0-3%3" in first and first.count("/e") == 4 and "/e4" not in first
    assert "#SBATCH --array=0-1%2" in second and "/e4" in second and "/e5" in second and "/e0" not in second


def test_queued_sweep_records_every_element_and_status_is_one_table(store, capsys, monkeypatch):
    slurm = SCHEDULERS["slurm"]
    monkeypatch.setattr(type(slurm), "submit", lambda self, script, run_dir: "77")
    monkeypatch.setattr(type(slurm), "array_states", lambda self, array_id: None)  # ask per element
    monkeypatch.setattr(type(slurm), "state", lambda self, job_id, run_dir=None: {
        "state": State.COMPLETED if job_id == "77_0" else State.PENDING})
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", *SWEEP, "--run-id", "sw", "--no-wait"]) == 0
    sweep_dir = store / "runs" / "sw"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["array_job_id"] == "77" and len(record["elements"]) == 6
    assert "#SBATCH --array=0-5%4" in (sweep_dir / "sweep.sh").read_text()  # a cluster's default cap
    for i, element in enumerate(record["elements"]):
        run = manifest(Path(element["run_dir"]))
        assert run["scheduler"]["job_id"] == f"77_{i}" and run["sweep"]["index"] == i
        assert (Path(element["run_dir"]) / "config.yaml").is_file()
    assert manifest(sweep_dir / "e5")["sweep"]["values"] == {"model.params.width": "8", "optim.lr": "0.1"}
    (sweep_dir / "e0" / "results.json").write_text(json.dumps({"best_val_acc": 0.25}))
    capsys.readouterr()
    assert cli.main(["status", str(sweep_dir)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["element", "model.params.width", "optim.lr", "state", "segments", "gpu-h", "best"]
    assert table[2].split() == ["e0", "4", "0.05", "COMPLETED", "0", "0.00", "best_val_acc", "0.25"]
    assert table[7].split() == ["e5", "8", "0.1", "PENDING", "0", "0.00", "-"]


def test_resume_of_a_sweep_resumes_the_elements_that_did_not_complete(store, capsys, monkeypatch):
    slurm = SCHEDULERS["slurm"]
    ended = {"77_0": State.COMPLETED, "77_1": State.FAILED, "77_2": State.TIMEOUT}
    monkeypatch.setattr(type(slurm), "submit", lambda self, script, run_dir: "88" if "e" in run_dir.name else "77")
    monkeypatch.setattr(type(slurm), "array_states", lambda self, array_id: None)  # ask per element
    monkeypatch.setattr(type(slurm), "state", lambda self, job_id, run_dir=None: {
        "state": ended.get(job_id, State.PENDING)})
    monkeypatch.setattr(type(slurm), "accounting", lambda self, job_id: None)  # not the test cluster's jobs 77_*
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", "--sweep", "optim.lr=0.05,0.1,0.2", "--run-id", "sw",
                     "--no-wait"]) == 0
    sweep_dir = store / "runs" / "sw"
    (sweep_dir / "e1" / "logs" / "job-77_1.out").write_text("element one's log\n")
    capsys.readouterr()
    assert cli.main(["logs", str(sweep_dir)]) == 0
    assert "==> e1 (optim.lr=0.1) <==\nelement one's log" in capsys.readouterr().out
    assert cli.main(["resume", str(sweep_dir)]) == 0
    jobs = [manifest(sweep_dir / f"e{i}")["scheduler"]["job_id"] for i in range(3)]
    assert jobs == ["77_0", "88", "88"]  # the completed element stays as it was
    assert manifest(sweep_dir / "e1")["resumes"][0]["previous_job_id"] == "77_1"


def test_a_sweep_file_lists_the_runs(store, capsys, monkeypatch, tmp_path):
    slurm = SCHEDULERS["slurm"]
    monkeypatch.setattr(type(slurm), "submit", lambda self, script, run_dir: "77")
    monkeypatch.setattr(type(slurm), "array_states", lambda self, array_id: None)  # ask per element
    monkeypatch.setattr(type(slurm), "state", lambda self, job_id, run_dir=None: {"state": State.PENDING})
    runs = tmp_path / "runs.yaml"
    runs.write_text("runs:\n  - {optim.lr: 0.1, model.params.width: 4}\n  - {optim.lr: 0.05}\n")
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", "--sweep-file", str(runs), "--run-id", "sw", "--no-wait"]) == 0
    assert "#SBATCH --array=0-1%2" in (store / "runs" / "sw" / "sweep.sh").read_text()
    assert manifest(store / "runs" / "sw" / "e0")["config"]["model"]["params"]["width"] == 4
    capsys.readouterr()
    assert cli.main(["status", str(store / "runs" / "sw")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["element", "optim.lr", "model.params.width", "state", "segments", "gpu-h", "best"]
    assert table[3].split() == ["e1", "0.05", "-", "PENDING", "0", "0.00", "-"]


@pytest.mark.parametrize("text", ["[]", "runs: {optim.lr: 0.1}", "- optim.lr=0.1", "runs: [\n"])
def test_a_bad_sweep_file_is_refused(store, capsys, tmp_path, text):
    (tmp_path / "runs.yaml").write_text(text)
    assert cli.main(["ci-slurm", "n1_gpu1", "demo", "--sweep-file", str(tmp_path / "runs.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sweep-file" in err[0], err

# The real arrays: a sweep of three demo runs at a tiny size, at most 2 elements at once.

def completed_elements(sweep_dir: Path):
    record = json.loads((sweep_dir / "sweep.json").read_text())
    for element in record["elements"]:
        run_dir = Path(element["run_dir"])
        log = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
        assert manifest(run_dir)["sweep"]["values"] == element["values"]
        results = json.loads((run_dir / "results.json").read_text())
        assert results["model"], log[-2000:]
    return record


@pytest.mark.image
def test_a_local_sweep_runs_at_most_k_at_once(cpu_image, demo_data, runs_dir):
    done = run_cluster("local", "cpu_1proc", "demo", "--set", f"data.root={demo_data}", *TINY,
                       "--sweep", "optim.lr=0.05,0.1,0.2", "--max-parallel", "2", "--run-id", "sw", "--timeout", "600")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    completed_elements(runs_dir / "sw")
    assert len(re.findall(r"^e\d .* COMPLETED +1 +[\d.]+ +best_", done.stdout, re.M)) == 3, done.stdout
    starts = sorted(json.loads(line)["time"] for i in range(3)
                    for line in (runs_dir / "sw" / f"e{i}" / "logs" / "segments.jsonl").read_text().splitlines()
                    if '"start"' in line)
    ends = sorted(json.loads(line)["time"] for i in range(3)
                  for line in (runs_dir / "sw" / f"e{i}" / "logs" / "segments.jsonl").read_text().splitlines()
                  if '"end"' in line)
    assert starts[2] >= ends[0]  # the third started only once one of the first two had ended


def slurm_job(job_id: str) -> dict:
    """scontrol's fields of a job (an array's task by its ARRAY_INDEX id)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def wait_for(predicate, what: str, timeout_s: float = 180) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.5)


@pytest.mark.image
@pytest.mark.slurm
def test_a_resumed_element_waits_for_its_array_under_max_parallel(cpu_image, slurm_cluster, runs_dir, tmp_path):
    """--max-parallel 1: e0 fails at once and the array's e1 runs. Resumed, e0 is a job outside the array, which
    Slurm's %1 does not count: it waits for the array (afterany) instead of running beside e1. Two cheap commands,
    no training."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "step.sh").write_text(  # e1 runs until the test lets it end (a busy machine's resume is slow)
        'case "$CT_RUN_DIR" in */e0) exit 3;; esac\n'
        'for _ in $(seq 300); do [ -e "$CT_RUN_DIR/release" ] && exit 0; sleep 1; done\n')
    done = run_cluster("ci-slurm", "n1_gpu1", "--sweep", "trainer.max_epochs=1,2", "--max-parallel", "1", "--run-id",
                       "held", "--no-wait", "--stale-image-ok", "--", "bash", "step.sh", cwd=tmp_path / "code")
    assert done.returncode == 0, done.stdout + done.stderr
    array = json.loads((runs_dir / "held" / "sweep.json").read_text())["array_job_id"]
    try:
        wait_for(lambda: slurm_job(f"{array}_1").get("JobState") == "RUNNING", "e1 runs once e0 has failed")
        resumed = run_cluster("resume", runs_dir / "held" / "e0")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        job_id = manifest(runs_dir / "held" / "e0")["scheduler"]["job_id"]
        held = slurm_job(job_id)
        (runs_dir / "held" / "e1" / "release").touch()
        wait_for(lambda: slurm_job(job_id).get("JobState") in ("FAILED", "COMPLETED"), "the resumed e0 ends")
        assert slurm_job(job_id)["StartTime"] >= slurm_job(f"{array}_1")["EndTime"]  # never beside e1
        assert (held["JobState"], held["Reason"]) == ("PENDING", "Dependency"), held
        assert f"after job {array} (its sweep runs at most --max-parallel at once)" in resumed.stdout, resumed.stdout
    finally:
        subprocess.run(["scancel", array], capture_output=True)
