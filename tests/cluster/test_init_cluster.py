"""`init-cluster` drafts a cluster file from the live scheduler; `check-cluster` reports where a file has drifted
from it (issue 30 items 1 and 2: the test Slurm cluster, and the LSF stand-in's bqueues -l and lshosts)."""
import json
import os
import subprocess

import pytest

from conftest import manifest, run_cluster, wait_for_slurm_job
from cluster_train.host import check_cluster, clusters, init_cluster
from cluster_train.host.schedulers.base import Inventory, LivePartition

SMALL = ["--set", "trainer.max_epochs=1", "--set", "data.num_workers=0", "--set", "trainer.limit_train_batches=4",
         "--set", "trainer.limit_val_batches=2"]


def live(name, gpus=4, gpu_name="", max_time="", nodes=2, default=False):
    return LivePartition(name=name, nodes=nodes, cores_per_node=32, threads_per_core=2, mem_per_node_gb=250,
                         gpus_per_node=gpus, gpu_name=gpu_name, max_time=max_time, features=("gpu",),
                         some_features=(), default=default)


SITE = Inventory(partitions=[live("a100", gpu_name="a100", max_time="2-00:00:00", default=True),
                             live("v100", gpu_name="v100l", max_time="00:30:00"), live("mystery", gpu_name="zx9"),
                             live("cpu", gpus=0, nodes=10)],
                 accounts=("lab", "other"), qos=("normal",))


def test_a_draft_names_each_gpus_image_marks_what_it_cannot_know_and_passes_once_filled(tmp_path):
    text = init_cluster.draft("site", SITE)
    path = tmp_path / "site.yaml"
    path.write_text(text)
    assert "a100: {image: cuda12.8, gpu_type: A100, gpus_per_node: 4, scheduler_gpu_name: a100" not in text
    assert "a100: {image: cuda12.8, gpu_type: A100, gpus_per_node: 4, cpus_per_node: 32" in text
    assert "v100: {image: cuda11.6, gpu_type: V100" in text and "scheduler_gpu_name: v100l, gpu_request: typed" in text
    assert "mystery: {image: FILL_IN, gpu_type: FILL_IN" in text and "Slurm calls the GPU 'zx9'" in text
    assert "cpu_1gpu" not in text and "# Your accounts: lab, other" in text
    assert 'v100_1gpu: {description: one GPU of v100, partition: v100, nodes: 1, gpus_per_node: 1, ' \
           'cpus_per_task: 16, mem_gb: 62, time: "00:30:00"}' in text  # the partition's limit is shorter than 1 h
    _, problems = check_cluster.check_cluster(str(path), scheduler_check=False)
    assert problems and any("FILL_IN" in line for line in problems), problems
    path.write_text(text.replace("image: FILL_IN, gpu_type: FILL_IN", "image: cuda12.8, gpu_type: H100"))
    report, problems = check_cluster.check_cluster(str(path), scheduler_check=False)
    assert problems == [] and len(report) == 6, problems


def test_drift_names_a_time_limit_above_the_partitions(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(init_cluster.draft("site", SITE).replace('time: "00:30:00"', 'time: "02:00:00"')
                    .replace("image: FILL_IN, gpu_type: FILL_IN", "image: cuda12.8, gpu_type: H100"))
    drifted = check_cluster.drift(clusters.load(path), SITE)
    assert drifted == ["profile 'v100_1gpu': time 02:00:00 is above partition v100's limit 00:30:00; shorten it",
                       "profile 'v100_node': time 02:00:00 is above partition v100's limit 00:30:00; shorten it"]


@pytest.mark.image
@pytest.mark.slurm
def test_a_draft_of_the_test_cluster_checks_trains_the_demo_and_shows_drift(cpu_image, slurm_cluster, demo_data,
                                                                           runs_dir, tmp_path):
    draft = tmp_path / "drafted.yaml"
    done = run_cluster("init-cluster", "drafted", "--out", str(draft))
    assert done.returncode == 0 and "3 partition(s)" in done.stdout, done.stderr
    assert "FILL_IN" not in draft.read_text()  # the test GPU's name is a flavors.yaml alias: nothing to fill
    again = run_cluster("init-cluster", "drafted", "--out", str(draft))
    assert again.returncode == 2 and "already exists" in again.stderr  # nothing overwritten
    checked = run_cluster("check-cluster", str(draft))
    assert checked.returncode == 0 and "agrees with the live slurm's 3 partition(s)" in checked.stdout, checked.stderr
    trained = run_cluster(str(draft), "ci_1gpu", "demo", "--set", f"data.root={demo_data}", *SMALL, "--no-wait")
    assert trained.returncode == 0, trained.stderr
    run_dir = next(runs_dir.iterdir())
    assert wait_for_slurm_job(manifest(run_dir)["scheduler"]["job_id"]) == "COMPLETED"
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 1
    drifted = tmp_path / "drifted.yaml"
    drifted.write_text(draft.read_text().replace("ci-small: {image: cpu, gpu_type: fake, gpus_per_node: 4",
                                                 "ci-small: {image: cpu, gpu_type: fake, gpus_per_node: 8")
                       .replace("  ci-high: {", "  ci-gone: {partition: ci-gone, image: cpu}\n  ci-high: {"))
    said = run_cluster("check-cluster", str(drifted))
    assert said.returncode == 2, said.stdout
    assert "partition 'ci-small' states gpus_per_node 8 but the scheduler's ci-small nodes have 4" in said.stderr
    assert "partition 'ci-gone': the scheduler has no partition 'ci-gone'" in said.stderr


def test_a_draft_of_the_lsf_standin_has_its_queues_checks_and_shows_drift(lsf_path, tmp_path, monkeypatch):
    draft = tmp_path / "lsf.yaml"
    done = run_cluster("init-cluster", "drafted-lsf", "--scheduler", "lsf", "--out", str(draft))
    assert done.returncode == 0 and "2 partition(s)" in done.stdout, done.stderr
    text = draft.read_text()
    assert "scheduler: lsf" in text and "FILL_IN" not in text  # lshosts -gpu's model ctgpu is a flavors.yaml alias
    assert "  ci: {image: cpu, gpu_type: fake, gpus_per_node: 4, scheduler_gpu_name: ctgpu, gpu_request: typed, " \
           "cpus_per_node: 8, mem_per_node_gb: 15, nodes: 4}" in text  # lshosts' 16000M is 15 GiB and a bit
    assert 'nodes: 2, max_time: "0:30"}' in text and 'ci_short_1gpu: {description: one GPU of ci-short, ' \
           'partition: ci-short, nodes: 1, gpus_per_node: 1, cpus_per_task: 2, mem_gb: 3, time: "0:30"}' in text
    checked = run_cluster("check-cluster", str(draft))
    assert checked.returncode == 0 and "agrees with the live lsf's 2 partition(s)" in checked.stdout, checked.stderr
    draft.write_text(text.replace("nodes: 2, max_time", "nodes: 3, max_time").replace('time: "1:00"', 'time: "2:00"')
                     .replace('"0:30"}', '"1:00"}'))
    said = run_cluster("check-cluster", str(draft))
    assert "partition 'ci-short' states nodes 3 but the scheduler's ci-short nodes have 2" in said.stderr
    assert "profile 'ci_short_1gpu': time 1:00 is above partition ci-short's limit 0:30" in said.stderr
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a machine with no scheduler: one line, nothing written
    nothing = run_cluster("init-cluster", "elsewhere", "--scheduler", "lsf", "--out", str(tmp_path / "none.yaml"))
    assert nothing.returncode == 2 and "no scheduler answers here (LSF's bqueues)" in nothing.stderr
    assert not (tmp_path / "none.yaml").exists()


def test_a_draft_or_a_store_on_a_read_only_file_system_is_one_line(tmp_path):
    """A file system mounted read-only (root may write anywhere else): init-cluster's draft, an image import and a
    data pack into it each end in one line naming it, before anything is asked or written (issue 39 item 22)."""
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("data\n")
    (tmp_path / "x.sif").write_text("not read: the store is checked first\n")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "ct-frozen", str(frozen)], check=True)
    try:
        env = {**os.environ, "CT_IMAGES": str(frozen / "images")}
        said = [run_cluster(*argv, env=env) for argv in (["init-cluster", "mine", "--out", str(frozen / "mine.yaml")],
                                                         ["images", "import", str(tmp_path / "x.sif")],
                                                         ["data", "pack", str(tmp_path / "src"), "--name", "mine"])]
    finally:
        subprocess.run(["umount", str(frozen)], check=True)
    places = (f"the draft {frozen / 'mine.yaml'}: its directory {frozen}", f"the image store {frozen / 'images'}",
              f"the data store {frozen / 'images' / 'data'}")
    for done, what in zip(said, places):
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert f"{what} cannot be written: no directory can be made in {frozen} (Read-only file system)" in done.stderr
