"""Each failure the seeds hit is refused before anything is queued, with the cause and the fix (one line)."""
import json
import os
import time

import pytest

from conftest import ROOT, run_cluster

SEED_003 = ["torch-hpc", "l40s_4x4", "cifar100_resnet", "--set", "data.worker_mem_gb=10"]


def refused(done, *fragments):
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()  # preflight reports every failed check at once, one line each
    assert lines and all(line.startswith("run-cluster: error: ") for line in lines), done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr
    return done.stderr


def cluster_file(tmp_path, profile: str, scheduler="slurm", partition="gpu: {image: cuda12.8, gpu_type: A100, "
                 "gpus_per_node: 4, cpus_per_node: 32, mem_per_node_gb: 256, nodes: 4}"):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"name: test\nscheduler: {scheduler}\npartitions:\n  {partition}\nprofiles:\n  p: {profile}\n")
    return str(path)


@pytest.fixture(autouse=True)
def nothing_submitted(store):
    yield
    assert list((store / "runs").iterdir()) == []


def test_seed_003_eight_workers_per_rank_exhaust_host_ram(store):
    message = refused(run_cluster(*SEED_003, "--set", "data.num_workers=8", "--dry-run"),
                      "4 rank(s) per node x (3 GB + 8 dataloader workers x 10 GB) needs 332 GB per node",
                      "the job has 240 GB", "set data.num_workers=5 or fewer")
    assert "num_workers" in message


def test_seed_003_two_workers_per_rank_fit(store):
    done = run_cluster(*SEED_003, "--set", "data.num_workers=2", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "host RAM: about 92 GB per node of 240 GB requested" in done.stdout


NAVSIM_L40S = ["torch-hpc", "l40s_4x4", "navsim_planner"]


def test_seed_003_navsim_planner_is_refused_at_eight_workers_and_accepted_at_two(store):
    """experiments/navsim_planner.yaml states the host RAM seed 003's job saw: 8 workers per GPU, 4 GPUs per node,
    OOM-killed on 256 GB nodes; its fix, 2 workers, ran."""
    refused(run_cluster(*NAVSIM_L40S, "--set", "data.num_workers=8", "--dry-run"),
            "(4 GB + 8 dataloader workers x 10 GB) needs 336 GB per node but the job has 240 GB",
            "set data.num_workers=5 or fewer", "10 GB per worker as stated (data.worker_mem_gb in "
                                               "experiments/navsim_planner.yaml)")
    done = run_cluster(*NAVSIM_L40S, "--set", "data.num_workers=2", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "host RAM: about 96 GB per node of 240 GB requested" in done.stdout


def earlier_run(root, run_id, data_root, rank_gb, worker_gb, age_s=0, cluster="torch-hpc"):
    """A finished run of navsim_planner as the runs root keeps it: its manifest, and results.json's peaks."""
    run = root / run_id
    run.mkdir(parents=True)
    config = {"name": "navsim_planner", "data": {"name": "planner_scenes", "root": str(data_root)}}
    (run / "manifest.json").write_text(json.dumps({"run_id": run_id, "cluster": cluster, "config": config}))
    memory = {"measure": "pss", "rank_peak_gb": rank_gb, "worker_peak_gb": worker_gb}
    (run / "results.json").write_text(json.dumps({"host_memory": memory}))
    os.utime(run / "results.json", (time.time() - age_s, time.time() - age_s))


def test_the_newest_measured_figures_of_the_same_experiment_and_data_replace_the_stated_ones(store, tmp_path):
    """x 1.25 (measured.MARGIN); an older run, a run on other data, and a rank measured on another cluster are not
    used; a --set figure wins."""
    root, data = tmp_path / "earlier", ROOT / "data" / "navsim-synthetic"
    earlier_run(root, "newest", data, rank_gb=3.2, worker_gb=6.4, age_s=60)
    earlier_run(root, "older", data, rank_gb=1, worker_gb=1, age_s=3600)
    earlier_run(root, "other-data", tmp_path, rank_gb=1, worker_gb=1)
    earlier_run(root, "on-the-cpu", data, rank_gb=0.5, worker_gb=None, cluster="local")
    env = {**os.environ, "CT_RUNS_DIR": str(root)}
    refused(run_cluster(*NAVSIM_L40S, "--set", "data.num_workers=8", "--dry-run", env=env),
            "(4 GB + 8 dataloader workers x 8 GB) needs 272 GB per node", "set data.num_workers=7 or fewer",
            "4 GB per rank measured in run newest (3.2 GB +25 %), "
            "8 GB per worker measured in run newest (6.4 GB +25 %)")
    done = run_cluster(*NAVSIM_L40S, "--set", "data.num_workers=8", "--set", "data.worker_mem_gb=1", "--dry-run",
                       env=env)
    assert done.returncode == 0, done.stderr
    assert ("host RAM: about 48 GB per node of 240 GB requested; 4 GB per rank measured in run newest (3.2 GB +25 %), "
            "1 GB per worker as you set it (--set data.worker_mem_gb; 6.4 GB measured in run newest)") in done.stdout


def test_more_workers_than_cpus(store):
    refused(run_cluster("gilbreth", "n1_gpu1", "--set", "data.num_workers=64", "--dry-run"),
            "data.num_workers=64 dataloader workers per rank but each rank has 16 CPU(s)")


def test_multi_node_without_srun_would_hang(store, tmp_path):
    path = cluster_file(tmp_path, "{partition: gpu, nodes: 4, gpus_per_node: 4, mem_gb: 64, launch: lightning}")
    refused(run_cluster(path, "p", "--dry-run"), "without srun: only rank 0 would join", "set launch: srun")


def test_independent_packing_outside_slurm_is_refused(store, tmp_path):
    """Only the Slurm template starts one step per task; elsewhere the tasks would silently never run."""
    path = cluster_file(tmp_path, "{partition: gpu, gpus_per_node: 2, mem_gb: 64, time: '4:00', launch: independent, "
                        "tasks: [{name: a}, {name: b}]}", scheduler="lsf")
    refused(run_cluster(path, "p", "--dry-run"), "launch: independent packs tasks with one srun step each, which lsf "
                                                  "lacks")


def test_tasks_per_node_not_matching_gpus(store, tmp_path):
    path = cluster_file(tmp_path, "{partition: gpu, nodes: 1, gpus_per_node: 4, ranks_per_node: 1, mem_gb: 64}")
    refused(run_cluster(path, "p", "--dry-run"), "starts 1 rank(s) per node on 4 GPU(s)", "set ranks_per_node to 4")


def test_devices_1_under_several_tasks_is_refused(store, tmp_path):
    path = cluster_file(tmp_path, "{partition: gpu, gpus_per_node: 4, mem_gb: 64, trainer: {devices: 1}}")
    refused(run_cluster(path, "p", "--dry-run"), "sets trainer.devices; it is derived from nodes and gpus_per_node")
    refused(run_cluster("gilbreth", "n1_gpu2", "--set", "trainer.devices=1", "--dry-run"),
            "trainer.devices is derived from the cluster profile")


@pytest.mark.parametrize("cluster, profile, gpu", [("h100x8", "h100_8gpu", "H100"), ("torch-hpc", "l40s_2x4", "L40S")])
def test_cuda_11_6_image_cannot_drive_hopper_or_ada(store, cluster, profile, gpu):
    refused(run_cluster(cluster, profile, "--flavor", "cuda11.6", "--dry-run"),
            f"image flavor 'cuda11.6' cannot drive {gpu} GPUs", "make image FLAVOR=cuda12.8")


def site_gpus(gpu_type: str) -> str:
    return f"gpu: {{image: cuda12.8, gpu_type: {gpu_type}, gpus_per_node: 4, cpus_per_node: 32, mem_per_node_gb: 256}}"


def test_a_sites_own_gpu_name_passes_the_image_check(store, tmp_path):
    path = cluster_file(tmp_path, "{partition: gpu, gpus_per_node: 1, cpus_per_task: 4, mem_gb: 32}",
                        partition=site_gpus("A100-SXM4-40GB"))
    done = run_cluster(path, "p", "--dry-run")
    assert done.returncode == 0, done.stderr


def test_an_alias_of_a_hopper_gpu_still_refuses_the_cuda_11_6_image(store, tmp_path):
    path = cluster_file(tmp_path, "{partition: gpu, gpus_per_node: 1, cpus_per_task: 4, mem_gb: 32}",
                        partition=site_gpus("nvidia_h100_80gb_hbm3"))
    refused(run_cluster(path, "p", "--flavor", "cuda11.6", "--dry-run"),
            "image flavor 'cuda11.6' cannot drive H100 GPUs")


def test_missing_image_names_the_build_command(store, tmp_path):
    env = {**os.environ, "CT_IMAGES": str(tmp_path / "none")}
    refused(run_cluster("h100x8", "h100_4gpu", env=env), "make image FLAVOR=cuda12.8")


@pytest.mark.parametrize(
    "profile, fragment",
    [
        ("{partition: gpux, mem_gb: 4}", "unknown partition of cluster 'test' 'gpux'"),
        ("{partition: gpu, gpus_per_node: 8, mem_gb: 4}", "asks for 8 GPUs per node but a node has 4"),
        ("{partition: gpu, gpus_per_node: 1, mem_gb: 512}", "asks for 512 GB per node but a node has 256 GB"),
        ("{partition: gpu, nodes: 9, gpus_per_node: 1, mem_gb: 4}", "asks for 9 nodes but the partition has 4"),
        ("{partition: gpu, gpus_per_node: 1, mem_gb: 4, time: '4 hours'}", "time limit '4 hours' is malformed"),
        ("{partition: gpu, gpus_per_node: 1, mem_gb: 4, time: '0-00:05:00'}",
         "grace_s: 300 (the time-limit warning) is not shorter than the time limit '0-00:05:00' (300 s)"),
        ("{partition: gpu, gpus_per_node: 1, mem_gb: 4, time: '10', grace_s: 900}", "lower grace_s below 600"),
        ("{partition: gpu, gpus_per_node: 1, mem_gb: 4, time: '0'}", "sets no time limit, yet the time-limit warning"),
        ("{partition: gpu, gpus_per_node: 1, mem_gb: 4, time: '2-00:00:01'}",
         "time '2-00:00:01' is longer than the max_time '48:00:00' of partition 'gpu'; lower time to 48:00:00"),
    ],
)
def test_scheduler_would_reject(store, tmp_path, profile, fragment):
    partition = ("gpu: {image: cuda12.8, gpu_type: A100, gpus_per_node: 4, cpus_per_node: 32, mem_per_node_gb: 256, "
                 "nodes: 4, max_time: '48:00:00'}")
    refused(run_cluster(cluster_file(tmp_path, profile, partition=partition), "p", "--dry-run"), fragment)


def test_a_day_form_time_within_max_time_is_accepted(store, tmp_path):
    partition = ("gpu: {image: cuda12.8, gpu_type: A100, gpus_per_node: 4, cpus_per_node: 32, mem_per_node_gb: 256, "
                 "nodes: 4, max_time: '2-00:00:00'}")
    profile = "{partition: gpu, gpus_per_node: 1, cpus_per_task: 4, mem_gb: 32, time: '1-00:00:00'}"
    done = run_cluster(cluster_file(tmp_path, profile, partition=partition), "p", "--dry-run")
    assert done.returncode == 0 and "#SBATCH --time=1-00:00:00\n" in done.stdout, done.stderr


def test_without_a_memory_request_host_ram_is_checked_against_the_node(store, tmp_path):
    """No request: the site's default, which a node's memory bounds; the estimate still runs against that."""
    path = cluster_file(tmp_path, "{partition: gpu, gpus_per_node: 4, cpus_per_task: 8}")
    refused(run_cluster(path, "p", "--set", "data.num_workers=8", "--set", "data.worker_mem_gb=10", "--dry-run"),
            "needs 332 GB per node but a node (the site's default at most) has 256 GB",
            "set data.num_workers=6 or fewer, or choose a partition with more memory per node")


def test_lsf_time_limit_uses_lsf_syntax(store, tmp_path):
    partition = "gpuv100: {image: cuda11.6, gpu_type: V100, gpus_per_node: 2, cpus_per_node: 24, mem_per_node_gb: 384}"
    path = cluster_file(tmp_path,
                        "{partition: gpuv100, gpus_per_node: 1, cpus_per_task: 4, mem_gb: 64, time: '04:00:00'}",
                        scheduler="lsf", partition=partition)
    refused(run_cluster(path, "p", "--dry-run"), "time limit '04:00:00' is malformed; write it like 4:00")


def test_missing_account_names_the_settings_file_and_key(store, tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    env = {**os.environ, "CT_SETTINGS": str(tmp_path / "empty.yaml")}
    refused(run_cluster("gilbreth", "n1_gpu1", "--dry-run", env=env), "cluster 'gilbreth' needs your account",
            str(tmp_path / "empty.yaml"), "clusters: {gilbreth: {account: ...}}")


def test_packing_needs_the_users_expert_checkpoints(store):
    refused(run_cluster("slurm-4gpu", "fusion_4gpu", "cifar100_fusion", "--dry-run"),
            "cluster 'slurm-4gpu' needs your experts", "experts: ...")


V100 = "gpuv100: {image: cuda11.6, gpu_type: V100, gpus_per_node: 2, cpus_per_node: 24, mem_per_node_gb: 384}"
SETS = "which the script already sets; remove it from directives and set"


@pytest.mark.parametrize("scheduler, partition, profile, accepted, refusals", [
    ("slurm", None, "{partition: gpu, gpus_per_node: 1, cpus_per_task: 4, mem_gb: 32", "--begin=now+1hour",
     [f"directive '-N 1' repeats nodes, {SETS} nodes instead",  # the value the key gives, once more
      f"directive '--mem-per-gpu=8G' repeats mem/mem-per-cpu/mem-per-gpu, {SETS} mem_gb, mem_per_gpu_gb, "
      f"mem_per_cpu_gb or whole_node instead"]),  # another way to give the memory mem_gb gives
    ("lsf", V100, "{partition: gpuv100, gpus_per_node: 1, cpus_per_task: 4, mem_gb: 64, time: '4:00'",
     "-R \"affinity[core(4)]\"",  # -R: LSF merges several, as it merges the script's own
     [f"directive '-W 4:00' repeats W, {SETS} time instead",
      f"directive '-n 8' repeats n, {SETS} nodes and cpus_per_task instead"]),  # 8 slots where the key gives 4
])
def test_a_raw_directive_repeating_or_contradicting_a_key_is_refused(store, tmp_path, scheduler, partition, profile,
                                                                     accepted, refusals):
    """Each refused directive is named, every one at once; one no key sets passes (on Slurm and LSF)."""
    where = {"partition": partition} if partition else {}
    given = [refusal.split("'")[1] for refusal in refusals]
    path = cluster_file(tmp_path, f"{profile}, directives: {given + [accepted]!r}}}", scheduler=scheduler, **where)
    message = refused(run_cluster(path, "p", "--dry-run"), *[f"profile 'p': {refusal}" for refusal in refusals])
    assert accepted not in message
    path = cluster_file(tmp_path, f"{profile}, directives: {[accepted]!r}}}", scheduler=scheduler, **where)
    done = run_cluster(path, "p", "--dry-run")
    assert done.returncode == 0 and f"{accepted}\n" in done.stdout, done.stderr
