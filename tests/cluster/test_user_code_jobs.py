"""Both example projects (examples/) run unchanged through every launch shape inside the image: local, the test Slurm
cluster on 2 nodes x 2 tasks, the LSF stand-in on 2 hosts; each rank sees the same world size and its own rank;
--rerun reproduces the metrics from the recorded snapshot, whatever happened to the project since; --dev runs a task
from this checkout's cluster_train package. (The Lightning one saving on the time-limit warning, requeued and resumed:
beside the other long runs, in tests/cluster/test_long_runs.py.)"""
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from conftest import ROOT, job_logs, manifest, release_requeued, run_cluster

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
EXAMPLES = ROOT / "examples"
DDP = [str(EXAMPLES / "ddp_plain" / "experiment.yaml")]
LIGHTNING = [str(EXAMPLES / "lightning_smart" / "experiment.yaml")]


def lightning(shape: str):
    return ["--", "python", "train.py", "--config", f"configs/train/{shape}.yaml"]


def wait_ended(run_dir: Path, timeout_s: float = 600, job_id: str = "") -> list:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        found = segments.read(run_dir)
        if found and found[-1].how in ("COMPLETED", "FAILED", "TIMEOUT", "TERMINATED"):
            return found
        if job_id:
            release_requeued(job_id)
        time.sleep(2)
    raise AssertionError(f"{run_dir.name} did not end in {timeout_s} s\n{job_logs(run_dir)[-3000:]}")


def completed(run_dir: Path, world: int, hosts=None) -> dict:
    """The run completed, every rank logged the same world size and its own rank (on the hosts given)."""
    found = wait_ended(run_dir)
    log = job_logs(run_dir)
    assert found[-1].how == "COMPLETED", log[-4000:]
    ranks = re.findall(r"^(?:\[\S+\] )?rank (\d+)/(\d+) local_rank \S+ node_rank \S+ host (\S+)", log, re.M)
    assert sorted(int(r) for r, _, _ in ranks) == list(range(world)), log[-4000:]
    assert {int(w) for _, w, _ in ranks} == {world}
    if hosts:
        assert {h for _, _, h in ranks} == hosts, ranks
    written = run_dir / "results.json"  # ddp_plain's, the results contract; the Lightning example's own metrics.json
    return json.loads((written if written.is_file() else run_dir / "metrics.json").read_text())


def submit(*args):
    done = run_cluster(*args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    return done


def test_both_examples_run_locally_and_rerun_their_snapshot(cpu_image, runs_dir, tmp_path):
    project = tmp_path / "ddp_plain"
    shutil.copytree(EXAMPLES / "ddp_plain", project)
    submit("local", "cpu_2proc", project / "experiment.yaml", "--run-id", "ddp", "--no-wait")
    (project / "train.py").write_text("raise SystemExit(9)\n")  # edited after submission: not what runs
    submit("local", "cpu_2proc", *LIGHTNING, "--run-id", "lit", "--wait", *lightning("local_2proc"))
    ddp = completed(runs_dir / "ddp", 2)
    lit = completed(runs_dir / "lit", 2)
    assert ddp["world_size"] == 2 and ddp["final_loss"] < 0.5 * ddp["initial_loss"]
    assert lit["world_size"] == 2 and lit["val_acc"] > 0.5  # four classes: chance is 0.25
    recorded = manifest(runs_dir / "ddp")["code"]
    assert recorded["source"] == str(project) and recorded["files"] == 2 and not recorded["dev"]
    for name in ("ddp", "lit"):  # both reruns at once, as both first runs
        submit("--rerun", runs_dir / name, "--run-id", f"{name}-rerun", "--no-wait")
    for name, first in (("ddp", ddp), ("lit", lit)):
        again = completed(runs_dir / f"{name}-rerun", 2)
        numbers = {k: v for k, v in first.items() if isinstance(v, float)}
        assert numbers and {k: again[k] for k in numbers} == pytest.approx(numbers, rel=1e-5), (again, first)
        assert manifest(runs_dir / f"{name}-rerun")["code"]["sha256"] == manifest(runs_dir / name)["code"]["sha256"]
    own_code_reaches_report_and_compare(runs_dir / "ddp", runs_dir / "ddp-rerun", ddp)


def own_code_reaches_report_and_compare(run_dir: Path, rerun_dir: Path, results: dict) -> None:
    """What the example wrote in the job (metrics.csv, results.json in $CT_RUN_DIR) is the report's curves and
    results and compare's rows; its config is its command, not the default experiment."""
    assert run_cluster("report", run_dir).returncode == 0
    page = (run_dir / "report.html").read_text()
    drawn = re.search(r'<script type="application/json" id="curve-points">(.*?)</script>', page, re.S)
    assert [(p["column"], p["points"]) for p in json.loads(drawn.group(1))] == [("train_loss", 20)]  # 200 steps / 10
    assert f"<td>final_loss</td><td>{results['final_loss']:.4g}</td>" in page and "resnet_cifar" not in page
    said = run_cluster("compare", run_dir, rerun_dir)
    assert said.returncode == 0 and re.search(r"^final_loss +\S+ +\S+$", said.stdout, re.M), said.stdout


def test_both_examples_on_two_slurm_nodes_and_two_lsf_hosts(cpu_image, slurm_cluster, runs_dir, lsf_path):
    """Four jobs at once: each example on ci-slurm n2_gpu2 (2 nodes x 2 srun tasks) and ci-lsf two_hosts (blaunch)."""
    submit("ci-slurm", "n2_gpu2", *DDP, "--run-id", "slurm-ddp", "--no-wait")
    submit("ci-slurm", "n2_gpu2", *LIGHTNING, "--run-id", "slurm-lit", "--no-wait", *lightning("slurm_n2_gpu2"))
    submit("ci-lsf", "two_hosts", *DDP, "--run-id", "lsf-ddp", "--no-wait")
    submit("ci-lsf", "two_hosts", *LIGHTNING, "--run-id", "lsf-lit", "--no-wait", *lightning("lsf_2hosts"))
    for name, world in (("slurm-ddp", 4), ("slurm-lit", 4), ("lsf-ddp", 2), ("lsf-lit", 2)):
        metrics = completed(runs_dir / name, world, hosts={"n1", "n2"})
        assert metrics["world_size"] == world


def test_dev_runs_the_task_from_the_checkouts_train_package(cpu_image, demo_data, runs_dir):
    submit("local", "cpu_1proc", "demo", "--dev", "--set", f"data.root={demo_data}", "--set", "trainer.max_epochs=1",
           "--set", "data.num_workers=0", "--run-id", "dev", "--wait")
    run_dir = runs_dir / "dev"
    assert wait_ended(run_dir)[-1].how == "COMPLETED"
    assert f"[cluster-train] cluster_train package: {run_dir}/code/cluster_train" in job_logs(run_dir)
    code = manifest(run_dir)["code"]
    assert code["dev"] and code["subtree"] == "cluster_train/" and code["source"] == str(ROOT)
