"""Seeds 000 and 002's experiments end to end inside the image, at small scale, each writing every file its users read:
seed 000 through the test Slurm cluster, 002 through `bin/run-cluster local` (a job runs the task the same way in the
image on either; test_end_to_end.py covers both paths). Seed 001, as its users pack it in one call (ci-slurm's seed001
pipeline), is examples/api/seed001_pipeline.py's run (test_api_examples.py). Seed 002's model family is trained one
step each by the model tests in the image (test_in_image.py); here one of them trains through the experiment, from a
pretrained weights file of the user's."""
import json
import subprocess

import pytest

from conftest import job_logs, manifest, run_cluster, wait_for_slurm_job

pytestmark = pytest.mark.image
WHERE = {"local": ("local", "cpu_1proc"), "slurm": ("ci-slurm", "n1_gpu1")}
# the experiments carry the seeds' real sizes (tests/image/test_experiment_sizes.py): every run here shrinks them
QUICK = ["--set", "trainer.max_epochs=2", "--set", "data.num_workers=0", "--set", "data.batch_size=8"]
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
