"""Seeds 000, 001 and 002's experiments end to end inside the image, at small scale, each writing every file its users
read: seed 000 through the test Slurm cluster, 002 through `bin/run-cluster local` (a job runs the task the same way
in the image on either; test_end_to_end.py covers both paths); and seed 001 as its users pack it, in one command
(ci-slurm's seed001 pipeline): stage 1's experts, four architectures side by side, then, once they have COMPLETED,
four (architecture, fusion) pairs, one per (fake) GPU, each with its own log prefix and outputs. Seed 002's model family
is trained one step each by the model tests in the image (test_in_image.py); here one of them trains through the
experiment, from a pretrained weights file of the user's."""
import json
import re
import subprocess

import pytest

from conftest import job_logs, manifest, run_cluster, wait_for_slurm_job
from cluster_train.host.runs import segments

pytestmark = pytest.mark.image
WHERE = {"local": ("local", "cpu_1proc"), "slurm": ("ci-slurm", "n1_gpu1")}
# the experiments carry the seeds' real sizes (tests/image/test_experiment_sizes.py): every run here shrinks them
QUICK = ["--set", "trainer.max_epochs=2", "--set", "data.num_workers=0", "--set", "data.batch_size=8"]
FEW_BATCHES = ["--set", "trainer.limit_train_batches=10", "--set", "trainer.limit_val_batches=5"]  # files, not accuracy
SIX_MODELS = ["PerFrameAggregation2D", "LateFusion2D", "EarlyFusion2D", "PerFrameAggregation3D", "LateFusion3D",
              "EarlyFusion3D"]


@pytest.fixture(scope="session")
def video_data(tmp_path_factory):
    from cluster_train.image.data.ufc10 import generate_ufc10

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


def assert_fusion_outputs(run_dir, arch, fusion):
    parts = run_dir / f"{arch}_fusions" / fusion
    for name in ("experts/expert_0.pth", "experts/expert_3.pth", "fusion/fusion_head.pth", "global/fusion_model.pth"):
        assert (parts / name).is_file(), f"{run_dir.name}: {name}"
    csv_log = run_dir / "csv_logs" / f"{arch}_fusions" / f"{arch}_{fusion}_training_log.csv"
    header = csv_log.read_text().splitlines()[0].split(",")
    assert {"loss", "accuracy", "experts_lr", "fusion_lr"} <= set(header), header


@LOCAL
def test_seed_002_trains_an_action_recognition_model_from_its_pretrained_weights(where, video_data, mobilenet_weights,
                                                                                 runs_dir):
    run_dir = start(where, "action_recognition", "--set", f"data.root={video_data}", *QUICK,
                    "--set", "trainer.max_epochs=1", "--set", "model.name=mobilenet_finetuned",
                    "--set", f"model.params={json.dumps({'weights_path': str(mobilenet_weights)})}",
                    run_id="action", runs_dir=runs_dir)
    finish(run_dir)
    assert json.loads((run_dir / "results.json").read_text())["model"] == "mobilenet_finetuned"
    assert (run_dir / "models" / "mobilenet_finetuned_best_weights.pth").is_file()


@pytest.mark.slurm
def test_seed_001_packing_runs_four_architecture_fusion_pairs_side_by_side(slurm_cluster, demo_data, runs_dir):
    data = ["--set", f"data.root={demo_data}", "--set", "trainer.max_epochs=1", "--set", "data.batch_size=16"]
    done = run_cluster("ci-slurm", "--pipeline", "seed001", *data, *FEW_BATCHES, "--run-id", "seed001")
    assert done.returncode == 0, done.stderr  # one command: stage 1's experts, then fusion once they have COMPLETED
    finish(runs_dir / "seed001-experts")
    for i, task in enumerate(("densenet", "resnet", "improved_wide_resnet", "resnext")):  # what stage 2 reads
        stage1 = runs_dir / "seed001-experts" / f"task-{i}-{task}"
        assert (stage1 / "splits" / "fusion_holdout_indices.npy").is_file(), stage1
        assert len(list(stage1.glob("checkpoints/*/expert_*_best.pth"))) == 4, stage1
    log = finish(runs_dir / "seed001-fusion")
    stage1, stage2 = (segments.read(runs_dir / f"seed001-{stage}") for stage in ("experts", "fusion"))
    assert stage1[-1].how == "COMPLETED" and stage1[-1].end <= stage2[0].start, (stage1, stage2)
    pairs = [("densenet_cifar", "multiplicative"), ("resnet_cifar", "multiplicativeAddition"),
             ("improved_wide_resnet", "TransformerBase"), ("resnext_cifar", "concatenation")]
    names = ["task-0-densenet-multiplicative", "task-1-resnet-multiplicativeAddition",
             "task-2-improved_wide_resnet-TransformerBase", "task-3-resnext-concatenation"]
    gpus = []
    for name, (arch, fusion) in zip(names, pairs):
        started = rf"^\[{name}\] \[cluster-train\] rank 0/1 on host n\d "  # whichever node was free once it could start
        gpus += re.findall(started + r".*CUDA_VISIBLE_DEVICES=(\S+)", log, re.M)
        assert_fusion_outputs(runs_dir / "seed001-fusion" / name, arch, fusion)  # its own run directory
    assert len(gpus) == 4 and len(set(gpus)) == 4, f"one (fake) GPU per task, got {gpus}"
    # side by side: Slurm started all four steps before any of them ended (its accounting, so a container that is
    # slow to start on a loaded machine does not count against it)
    job = manifest(runs_dir / "seed001-fusion")["scheduler"]["job_id"]
    steps = subprocess.run(["sacct", "-j", job, "-n", "-P", "-o", "JobID,Start,End"], capture_output=True,
                           text=True).stdout.split()
    times = [line.split("|")[1:] for line in steps if re.fullmatch(rf"{job}\.[0-3]", line.split("|")[0])]
    assert len(times) == 4 and max(start for start, _ in times) < min(end for _, end in times), steps
