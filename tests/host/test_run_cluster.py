"""bin/run-cluster on the host side: resolution, preflight refusals, rendering, and what is (not) written."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_cluster, stand_in_data


def test_dry_run_renders_srun_per_rank_and_submits_nothing(store):
    done = run_cluster("ci-slurm", "n2_gpu1", "demo", "--dry-run", "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for line in ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --partition=ci"]:
        assert line in out
    assert "srun --kill-on-bad-exit=1" in out and "apptainer exec --cleanenv" in out
    assert "2 node(s) x 1 rank(s) = 2 rank(s)" in out
    assert "64 per rank x 2 rank(s) x 1 accumulation = 128 effective" in out
    assert list((store / "runs").iterdir()) == []


def test_dry_run_script_is_valid_bash(store, tmp_path):
    Path("/tmp/a b;$(touch pwned)").mkdir(exist_ok=True)  # an input must exist, even with this name
    done = run_cluster("local", "cpu_2proc", "demo", "--dry-run", "--set", "data.root=/tmp/a b;$(touch pwned)")
    assert done.returncode == 0, done.stderr
    script = done.stdout.split("nothing submitted) ---\n", 1)[1]
    assert "-B '/tmp/a b;$(touch pwned):/tmp/a b;$(touch pwned):ro'" in script  # quoted, never interpreted
    (tmp_path / "s.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "s.sh")]).returncode == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["nocluster", "x"], "unknown cluster 'nocluster'"),
        (["ci-slurm", "n3_gpu1"], "unknown profile of cluster 'ci-slurm' 'n3_gpu1'"),
        (["ci-slurm", "n2_gpu1", "nope"], "unknown experiment 'nope'"),
        (["ci-slurm", "n2_gpu1", "demo", "--set", "trainer.devices=4"], "derived from the cluster profile"),
        (["ci-slurm", "n2_gpu1", "demo", "--set", "trainer.max_epoch=4"], "did you mean 'trainer.max_epochs'"),
        (["local", "cpu_2proc", "/nonexistent/exp.yaml"], "experiment file '/nonexistent/exp.yaml' does not exist"),
    ],
)
def test_bad_input_is_one_line_and_submits_nothing(store, args, message):
    done = run_cluster(*args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list((store / "runs").iterdir()) == []


def test_missing_image_prints_the_make_command(store, monkeypatch, tmp_path):
    env = {**os.environ, "CT_IMAGES": str(tmp_path / "empty")}
    done = run_cluster("local", "cpu_1proc", "demo", env=env)
    assert done.returncode == 2
    assert "make image FLAVOR=cpu" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert list((store / "runs").iterdir()) == []


def test_a_dry_run_can_be_reviewed_before_the_image_exists(store, tmp_path):
    """The one problem fixed outside the config (build the image) is a warning: the script is still printed."""
    env = {**os.environ, "CT_IMAGES": str(tmp_path / "empty")}
    done = run_cluster("h100x8", "h100_4gpu", "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert "warning: no cuda12.8 image has been built here" in done.stderr and "#SBATCH --nodes=1" in done.stdout
    both = run_cluster("h100x8", "h100_4gpu", "--dry-run", "--set", "optim.name=adamm", env=env)
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 2  # every problem at once
    assert "did you mean 'adamw'" in both.stderr and "make image FLAVOR=cuda12.8" in both.stderr


def test_a_set_value_the_profile_would_override_wins_or_is_refused(store):
    done = run_cluster("local", "cpu_2proc", "demo", "--dry-run", "--set", "trainer.strategy=fsdp")
    assert done.returncode == 0, done.stderr
    assert "trainer.strategy: your --set replaces the profile's 'ddp'" in done.stdout
    refused = run_cluster("local", "cpu_2proc", "demo", "--dry-run", "--set", "trainer.accelerator=gpu")
    assert refused.returncode == 2 and "profile 'cpu_2proc' has no GPUs" in refused.stderr


def test_names_lists_every_registry_without_torch():
    done = run_cluster("names")
    assert done.returncode == 0, done.stderr
    for word in ("resnet_cifar", "TransformerBase", "cifar100", "video_suite", "zero3_offload", "adamw", "cosine",
                 "bf16-mixed"):
        assert word in done.stdout


def test_failed_submission_leaves_no_run_dir(store, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: "
                                 "Invalid account' >&2\nexit 1\n")
    (fake / "sbatch").chmod(0o755)
    data = stand_in_data(tmp_path / "data")
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    done = run_cluster("ci-slurm", "n2_gpu1", "demo", "--set", f"data.root={data}", env=env)
    assert done.returncode == 2
    assert "sbatch failed: sbatch: error: Batch job submission failed: Invalid account" in done.stderr
    assert list((store / "runs").iterdir()) == []


def test_a_cluster_file_outside_the_repo(store, tmp_path):
    cluster = tmp_path / "elsewhere.yaml"
    cluster.write_text(
        "name: elsewhere\nscheduler: slurm\napptainer: {nv: true}\n"
        "partitions:\n  never-seen-gpu: {image: cpu, gpus_per_node: 2, cpus_per_node: 4, "
        "mem_per_node_gb: 8, nodes: 3}\n"
        "profiles:\n  two: {partition: never-seen-gpu, nodes: 3, gpus_per_node: 2, mem_gb: 4, time: '1:00:00'}\n"
    )
    done = run_cluster(str(cluster), "two", "demo", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --partition=never-seen-gpu" in done.stdout and " --nv " in done.stdout
    assert "#SBATCH --ntasks-per-node=2" in done.stdout


def test_scratch_symlink_is_bound_at_its_real_path_too(store, tmp_path):
    real = tmp_path / "gpfs" / "scratch-you"
    real.mkdir(parents=True)
    (tmp_path / "scratch").symlink_to(real)
    (store / "settings.yaml").write_text(f"scratch: {tmp_path / 'scratch'}\n")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "name: c\nscheduler: slurm\napptainer: {binds: ['${scratch}']}\n"
        "partitions:\n  p: {image: cpu, cpus_per_node: 4, mem_per_node_gb: 8, nodes: 1}\n"
        "profiles:\n  one: {partition: p, mem_gb: 4}\n"
    )
    done = run_cluster(str(cluster), "one", "demo", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"-B {real}:{real} -B {real}:{tmp_path / 'scratch'} " in done.stdout
    assert ":ro " in done.stdout.split("-B ", 1)[1]  # the data directory comes first, read-only


def test_input_paths_are_made_absolute_and_bound_read_only(store, tmp_path, monkeypatch):
    experts = tmp_path / "experts" / "resnet_cifar"
    experts.mkdir(parents=True)
    weights = tmp_path / "mobilenet.pth"
    weights.write_text("stand-in")
    monkeypatch.chdir(tmp_path)  # a relative input path is the project's, wherever run-cluster is started
    done = run_cluster("local", "cpu_1proc", "cifar100_fusion", "--dry-run", "--set",
                       f"task_params.experts_dir={experts}",
                       "--set", "model.name=mobilenet_finetuned", "--set", f"model.params.weights_path={weights}",
                       "--set", "task_params.holdout_path=data/cifar100-synthetic")
    assert done.returncode == 0, done.stderr
    for path in (experts, weights, ROOT / "data" / "cifar100-synthetic"):
        assert f"-B {path}:{path}:ro" in done.stdout


def test_a_missing_input_path_is_one_line_and_submits_nothing(store, tmp_path):
    data = stand_in_data(tmp_path / "data")
    done = run_cluster("local", "cpu_1proc", "cifar100_fusion", "--set", f"data.root={data}",
                       "--set", f"task_params.experts_dir={tmp_path / 'nope'}")
    assert done.returncode == 2
    assert f"task_params.experts_dir: {tmp_path / 'nope'} does not exist; fix task_params.experts_dir" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list((store / "runs").iterdir()) == []


def test_rerun_applies_and_records_extra_set_values(store, tmp_path, monkeypatch):
    """--rerun keeps the run's cluster, profile, config and image, and what its --set chose over the profile's values
    (its strategy, not cpu_1proc's single); a --set on top is applied and recorded."""
    from cluster_train.host import cli, submit
    from cluster_train.host.images import store as image_store
    record = image_store.current("cpu", store / "images")
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.yaml").write_text(f"name: demo\ndata: {{root: {tmp_path}, num_workers: 1, rank_mem_gb: 1}}\n"
                                     "trainer: {max_epochs: 2, strategy: zero2}\n")
    (old / "manifest.json").write_text(json.dumps({
        "run_id": "old", "cluster_file": str(ROOT / "clusters" / "local.yaml"), "profile": "cpu_1proc",
        "overrides": ["trainer.strategy=zero2", "trainer.max_epochs=2"],
        "image": {"sha256": record.sha256}, "scheduler": {"name": "local", "job_id": "4242"}}))
    seen = {}
    real = submit.one_run
    monkeypatch.setattr(submit, "one_run", lambda sub: real(seen.setdefault("sub", sub)))
    assert cli.main(["--rerun", str(old), "--set", "trainer.max_epochs=7", "--dry-run"]) == 0
    sub = seen["sub"]
    assert sub.run.trainer.max_epochs == 7 and sub.run.trainer.strategy == "zero2" and sub.rerun_of == "old"
    assert sub.overrides == {"trainer.strategy": "zero2", "trainer.max_epochs": 7}
    assert sub.job.image.sha256 == record.sha256 and sub.job.profile == "cpu_1proc"


def test_runs_go_to_the_run_root_of_the_settings_or_cluster_file_and_are_found_by_id(store, tmp_path, monkeypatch,
                                                                                      capsys):
    """`runs:` (the user's settings over the cluster file, ${scratch} filled in) is where a run directory goes;
    status, logs and --rerun then find the run by its id alone. The checkout's runs/ with a scratch set is warned."""
    from cluster_train.host import cli
    from cluster_train.host.schedulers import SCHEDULERS

    monkeypatch.delenv("CT_RUNS_DIR")
    monkeypatch.setattr(SCHEDULERS["local"], "submit", lambda script, run_dir: "4242")
    scratch = tmp_path / "scratch"
    (store / "settings.yaml").write_text(f"scratch: {scratch}\n")
    assert cli.main(["local", "cpu_1proc", "demo", "--dry-run", "--run-id", "home"]) == 0
    out, err = capsys.readouterr()
    assert f"run dir: {ROOT / 'runs' / 'home'}" in out and "inside the checkout" in err and "runs: ${scratch}" in err
    cluster = tmp_path / "lab.yaml"
    cluster.write_text((ROOT / "clusters" / "local.yaml").read_text() + "runs: ${scratch}/lab-runs\n")
    assert cli.main([str(cluster), "cpu_1proc", "demo", "--dry-run", "--run-id", "lab"]) == 0
    out, err = capsys.readouterr()
    assert f"run dir: {scratch / 'lab-runs' / 'lab'}" in out and "inside the checkout" not in err
    (store / "settings.yaml").write_text(f"scratch: {scratch}\nruns: ${{scratch}}/mine\n")
    assert cli.main(["local", "cpu_1proc", "demo", "--run-id", "by-id", "--no-wait", "--stale-image-ok"]) == 0
    assert (scratch / "mine" / "by-id" / "manifest.json").is_file()
    capsys.readouterr()
    assert cli.main(["status", "by-id"]) == 0 and capsys.readouterr().out.startswith("by-id: local job 4242")
    assert cli.main(["status", "no-such-id"]) == 2 and f"no run 'no-such-id' in" in capsys.readouterr().err


def test_a_profile_made_for_one_experiment_runs_it_by_default_and_names_it_beside_another(store, tmp_path, capsys):
    from cluster_train.host import cli

    for arch in ("densenet_cifar", "resnet_cifar", "improved_wide_resnet", "resnext_cifar"):
        (tmp_path / "experts" / arch).mkdir(parents=True)
    (store / "settings.yaml").write_text(f"experts: {tmp_path / 'experts'}\n")
    assert cli.main(["slurm-4gpu", "fusion_4gpu", "--dry-run", "--run-id", "own"]) == 0
    out, err = capsys.readouterr()
    assert "--job-name=cifar100_fusion" in out and "made for" not in err
    cli.main(["slurm-4gpu", "fusion_4gpu", "demo", "--dry-run", "--run-id", "other"])
    assert "profile fusion_4gpu is made for experiment cifar100_fusion, not demo; leave the experiment out" in \
        capsys.readouterr().err
