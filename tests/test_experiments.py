"""Seeds 000, 001 and 002's experiments end to end inside the image, at small scale, each writing every file its users
read: seed 000 through the test Slurm cluster, 001 and 002 through `bin/run-cluster local` (a job runs the task the
same way in the image on either; test_end_to_end.py covers both paths); and seed 001's 4-task packing: four
(architecture, fusion) pairs side by side, one per (fake) GPU, each with its own log prefix and outputs."""
import json
import re
import subprocess

import pytest

from conftest import job_logs, manifest, run_cluster, wait_for_slurm_job

pytestmark = pytest.mark.image
WHERE = {"local": ("local", "cpu_1proc"), "slurm": ("ci-slurm", "n1_gpu1")}
# the experiments carry the seeds' real sizes (tests/test_experiment_sizes.py): every run here shrinks them
QUICK = ["--set", "trainer.max_epochs=2", "--set", "data.num_workers=0", "--set", "data.batch_size=8"]
FEW_BATCHES = ["--set", "trainer.limit_train_batches=10", "--set", "trainer.limit_val_batches=5"]  # files, not accuracy
SIX_MODELS = ["PerFrameAggregation2D", "LateFusion2D", "EarlyFusion2D", "PerFrameAggregation3D", "LateFusion3D",
              "EarlyFusion3D"]
FUSIONS = ["multiplicative", "multiplicativeAddition", "TransformerBase", "concatenation"]
ACTION_MODELS = {  # seed 002's family, each as small as it goes
    "basic_cnn": {"width": 4}, "cnn_lstm": {"width": 4, "hidden": 16}, "vgg": {"layers": [8, "M", 16, "M"]},
    "mobilenet": {}, "efficientnet": {}, "ensemble": {"member_params": {"basic_cnn": {"width": 4},
                                                                        "cnn_lstm": {"width": 4, "hidden": 16}}},
    "mobilenet_finetuned": None,  # weights_path: the fixture's pretrained file
}


@pytest.fixture(scope="session")
def video_data(tmp_path_factory):
    from train.data.ufc10 import generate_ufc10

    return generate_ufc10(tmp_path_factory.mktemp("ufc10"), train_per_class=3, val_per_class=2, test_per_class=2)


@pytest.fixture(scope="session")
def mobilenet_weights(cpu_image, tmp_path_factory):
    """A mobilenet_v3_small state dict in torchvision's format, written by the image's torchvision (no download)."""
    path = tmp_path_factory.mktemp("weights") / "mobilenet_v3_small-047dcff4.pth"
    code = f"import torch, torchvision; torch.save(torchvision.models.mobilenet_v3_small().state_dict(), {str(path)!r})"
    subprocess.run(["apptainer", "exec", "--cleanenv", "-B", str(path.parent), cpu_image.path, "python", "-c", code],
                   check=True, timeout=300)
    return path


ON_SLURM = pytest.mark.parametrize("where", [pytest.param("slurm", marks=pytest.mark.slurm)], indirect=True)
LOCAL = pytest.mark.parametrize("where", ["local"], indirect=True)


@pytest.fixture
def where(request, cpu_image):
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")
    return request.param


def start(where, experiment, *args, run_id, runs_dir):
    """Local runs finish before this returns; Slurm jobs are only queued, so several run at once (see finish)."""
    cluster, profile = WHERE[where]
    done = run_cluster(cluster, profile, experiment, *args, "--run-id", run_id, *(["--no-wait"] * (where == "slurm")))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    return runs_dir / run_id


def finish(run_dir):
    """Wait for the run's Slurm job (a local run has ended already); returns the job's log."""
    scheduler = manifest(run_dir)["scheduler"]
    state = wait_for_slurm_job(scheduler["job_id"], timeout_s=900) if scheduler["name"] == "slurm" else "COMPLETED"
    log = job_logs(run_dir)
    assert state == "COMPLETED", log[-5000:]
    return log


@ON_SLURM
def test_seed_000_trains_the_six_video_models_in_sequence(where, video_data, runs_dir):
    run_dir = start(where, "ufc10_six_models", "--set", f"data.root={video_data}", *QUICK,
                    "--set", "task_params.model_params={width: 4, hidden: 16}", run_id="six", runs_dir=runs_dir)
    log = finish(run_dir)
    for model in SIX_MODELS:
        for name in (f"models/{model}_best_weights.pth", f"models/{model}_final_weights.pth",
                     f"checkpoints/{model}_training_history.json", f"checkpoints/{model}_epoch_1.pth",
                     f"checkpoints/{model}_epoch_2.pth"):
            assert (run_dir / name).is_file(), name
        history = json.loads((run_dir / "checkpoints" / f"{model}_training_history.json").read_text())
        assert len(history["val_acc"]) == 2, history
    table = log.split("FINAL RESULTS SUMMARY", 1)[-1]
    best = json.loads((run_dir / "results.json").read_text())["best_model"]
    assert all(model in table for model in SIX_MODELS) and f"Best performing model: {best}" in table, log[-3000:]


@LOCAL
def test_seed_001_experts_then_every_fusion_head(where, demo_data, runs_dir):
    experts = start(where, "cifar100_experts", "--set", f"data.root={demo_data}", *QUICK, *FEW_BATCHES,
                    "--set", "trainer.max_epochs=1",
                    "--set", "model.params={depth: 8, width: 4, stages: 3}", run_id="experts", runs_dir=runs_dir)
    finish(experts)
    assert (experts / "splits" / "fusion_holdout_indices.npy").is_file()
    folder = experts / "checkpoints" / "resnet_cifar"
    assert sorted(p.name for p in folder.glob("expert_*_best.pth")) == [f"expert_{i}_best.pth" for i in range(4)]
    fusions = [start(where, "cifar100_fusion", "--set", f"data.root={demo_data}", *QUICK, *FEW_BATCHES, "--set",
                     "trainer.max_epochs=1", "--set", f"task_params.experts_dir={folder}", "--set",
                     f"task_params.fusion={fusion}", "--set", "task_params.fusion_dim=16", run_id=f"fusion-{fusion}",
                     runs_dir=runs_dir) for fusion in FUSIONS]
    for fusion, run_dir in zip(FUSIONS, fusions):
        finish(run_dir)
        assert_fusion_outputs(run_dir, "resnet_cifar", fusion)


def assert_fusion_outputs(run_dir, arch, fusion):
    parts = run_dir / f"{arch}_fusions" / fusion
    for name in ("experts/expert_0.pth", "experts/expert_3.pth", "fusion/fusion_head.pth", "global/fusion_model.pth"):
        assert (parts / name).is_file(), f"{run_dir.name}: {name}"
    csv_log = run_dir / "csv_logs" / f"{arch}_fusions" / f"{arch}_{fusion}_training_log.csv"
    header = csv_log.read_text().splitlines()[0].split(",")
    assert {"loss", "accuracy", "experts_lr", "fusion_lr"} <= set(header), header


@LOCAL
def test_seed_002_trains_every_action_recognition_model(where, video_data, mobilenet_weights, runs_dir):
    runs = {}
    for name, params in ACTION_MODELS.items():
        params = {"weights_path": str(mobilenet_weights)} if params is None else params
        runs[name] = start(where, "action_recognition", "--set", f"data.root={video_data}", *QUICK,
                           "--set", "trainer.max_epochs=1", "--set", f"model.name={name}",
                           "--set", f"model.params={json.dumps(params)}", run_id=f"action-{name}", runs_dir=runs_dir)
    for name, run_dir in runs.items():
        finish(run_dir)
        results = json.loads((run_dir / "results.json").read_text())
        assert results["model"] == name, results
        assert (run_dir / "models" / f"{name}_best_weights.pth").is_file(), name


@pytest.mark.slurm
def test_seed_001_packing_runs_four_architecture_fusion_pairs_side_by_side(slurm_cluster, demo_data, runs_dir,
                                                                          tmp_path, monkeypatch):
    data = ["--set", f"data.root={demo_data}", "--set", "trainer.max_epochs=1", "--set", "data.batch_size=16"]
    done = run_cluster("ci-slurm", "experts_4x1", "cifar100_experts", *data, *FEW_BATCHES, "--run-id", "experts4",
                       "--no-wait")  # stage 1 only makes the experts stage 2 reads: a few batches each
    assert done.returncode == 0, done.stderr
    finish(runs_dir / "experts4")
    archs = {"densenet": "densenet_cifar", "resnet": "resnet_cifar", "improved_wide_resnet": "improved_wide_resnet",
             "resnext": "resnext_cifar"}
    experts = tmp_path / "experts"  # the user's `experts:` folder: one sub-folder per architecture
    experts.mkdir()
    for i, (task, arch) in enumerate(archs.items()):
        (experts / arch).symlink_to(runs_dir / "experts4" / f"task-{i}-{task}" / "checkpoints" / arch)
    (tmp_path / "settings.yaml").write_text(f"experts: {experts}\n")
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    done = run_cluster("ci-slurm", "fusion_4x1", "cifar100_fusion", *data, "--set", "task_params.fusion_dim=16",
                       "--run-id", "fusion4", "--no-wait")
    assert done.returncode == 0, done.stderr
    log = finish(runs_dir / "fusion4")
    pairs = [("densenet_cifar", "multiplicative"), ("resnet_cifar", "multiplicativeAddition"),
             ("improved_wide_resnet", "TransformerBase"), ("resnext_cifar", "concatenation")]
    names = ["task-0-densenet-multiplicative", "task-1-resnet-multiplicativeAddition",
             "task-2-improved_wide_resnet-TransformerBase", "task-3-resnext-concatenation"]
    gpus = []
    for name, (arch, fusion) in zip(names, pairs):
        gpus += re.findall(rf"^\[{name}\] \[cluster-train\] rank 0/1 on host n1 .*CUDA_VISIBLE_DEVICES=(\S+)", log, re.M)
        assert_fusion_outputs(runs_dir / "fusion4" / name, arch, fusion)  # its own run directory
    assert len(gpus) == 4 and len(set(gpus)) == 4, f"one (fake) GPU per task, got {gpus}"
    # side by side: all four had started training before any of them finished
    first_result = log.index("[cluster-train] results:")
    assert all(log.index(f"[{name}] [cluster-train] rank 0/1") < first_result for name in names), log[-4000:]
