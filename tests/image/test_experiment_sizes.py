"""The experiment files carry the seeds' real sizes (issue 13): tests shrink them with --set, never the other way
round. Each experiment's model is built on the meta device (no memory, no compute) and its parameter count must fall
in the published range; epochs and batch size must be the seed's. Shrinking an experiment file fails here."""
import re

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from cluster_train.shared import config as cfg  # noqa: E402
from cluster_train.shared.models import MODELS  # noqa: E402

# make test runs this module inside the image (test_in_image.py), by the torch and torchvision jobs use, and
# not again here; make test-fast runs it here
pytestmark = pytest.mark.image_copy

M = 1_000_000
# seed 001's four CIFAR-100 experts at their published sizes (parameters at 100 classes)
CIFAR_EXPERTS = {
    "resnet_cifar": (11.0 * M, 11.4 * M),  # ResNet-18 (CIFAR stem): 11.2 M
    "densenet_cifar": (0.75 * M, 0.85 * M),  # DenseNet-BC-100, k=12: 0.8 M
    "improved_wide_resnet": (36.0 * M, 37.0 * M),  # WRN-28-10: 36.5 M
    "resnext_cifar": (34.0 * M, 35.0 * M),  # ResNeXt-29 8x64d: 34.4 M
}
# seed 002's torchvision models at their published sizes, at UFC-10's 10 classes (ImageNet head replaced)
ACTION_MODELS = {"efficientnet": (3.9 * M, 4.1 * M), "mobilenet": (1.45 * M, 1.6 * M),
                 "mobilenet_finetuned": (1.45 * M, 1.6 * M)}
SIX_MODELS = ("PerFrameAggregation2D", "LateFusion2D", "EarlyFusion2D", "PerFrameAggregation3D", "LateFusion3D",
              "EarlyFusion3D")
# (epochs, batch size per rank) each experiment must state; demo is the CPU demo and stays small
SCHEDULES = {"cifar100_experts": (100, 128), "cifar100_fusion": (100, 128), "action_recognition": (100, 16),
             "ufc10_six_models": (10, 16), "cifar100_resnet": (30, 128), "demo": (4, 64),
             "navsim_planner": (40, 22), "smart_motion": (32, 16)}
# seed 003's Hydra-MDP v8192 (83 M) and seed 004's SMART at SMART-7M's scale: (vocabulary, parameter range)
SEED_MODELS = {"navsim_planner": (8192, (82 * M, 84 * M)), "smart_motion": (2025, (7 * M, 8 * M))}


def load(name, overrides=None):
    return cfg.load(ROOT / "experiments" / f"{name}.yaml", overrides)


def count(name, num_classes, **params):
    if name in ACTION_MODELS:
        pytest.importorskip("torchvision")  # only the image has it; without it the params are checked below
    if name == "mobilenet_finetuned":
        params = {**params, "weights_path": str(_weights())}
    with torch.device("meta"):
        model = MODELS.build(name, num_classes=num_classes, **params)
    return sum(p.numel() for p in model.parameters())


def _weights():
    from image.test_models import _pretend_pretrained_weights

    return _pretend_pretrained_weights()


def test_every_experiment_file_has_its_sizes_checked_here():
    assert {p.stem for p in (ROOT / "experiments").glob("*.yaml")} == set(SCHEDULES)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_epochs_and_batch_size_are_the_seeds(name):
    run = load(name)
    assert (run.trainer.max_epochs, run.data.batch_size) == SCHEDULES[name]


@pytest.mark.parametrize("arch", sorted(CIFAR_EXPERTS))
def test_cifar100_experts_train_each_architecture_at_its_published_size(arch):
    """--set model.name=ARCH alone gives the published size (task_params.model_sizes)."""
    from cluster_train.image.tasks.cifar_experts import model_params

    run = load("cifar100_experts", [f"model.name={arch}"])
    assert sorted(run.task_params["model_sizes"]) == sorted(CIFAR_EXPERTS)
    low, high = CIFAR_EXPERTS[arch]
    n = count(arch, 100, **model_params(run))
    assert low <= n <= high, f"{arch}: {n:,d} parameters"


def test_cifar100_experts_default_is_resnet18_and_params_override_its_row_key_by_key():
    from cluster_train.image.tasks.cifar_experts import model_params

    run = load("cifar100_experts")
    assert run.model.name == "resnet_cifar" and run.optim.name == "sgd"
    small = load("cifar100_experts", ["model.params.depth=10", "model.params.width=4"])
    assert model_params(small) == {"depth": 10, "width": 4, "stages": 4}
    assert count("resnet_cifar", 100, **model_params(small)) < 0.1 * M


def test_cifar100_fusion_fuses_the_experts_of_cifar100_experts():
    run = load("cifar100_fusion")
    assert run.task_params["experts_dir"].endswith("cifar100_experts/checkpoints/resnet_cifar")
    assert run.task_params["num_experts"] == load("cifar100_experts").task_params["num_experts"] == 4


def test_action_recognition_trains_efficientnet_b0_at_the_seeds_learning_rate():
    run = load("action_recognition")
    assert (run.model.name, run.model.params, run.optim.lr) == ("efficientnet", {}, 1e-3)
    low, high = ACTION_MODELS["efficientnet"]
    assert low <= count("efficientnet", 10) <= high


def header_choices(name):
    """The `--set model.name=X --set 'model.params={...}'` lines an experiment's header comment offers."""
    text = (ROOT / "experiments" / f"{name}.yaml").read_text()
    found = re.findall(r"^#\s+--set model\.name=(\S+) --set 'model\.params=(\{.*?\})'", text, re.M)
    return [(model, cfg.yaml_scalar(params)) for model, params in found]


def test_action_recognition_header_offers_the_published_sizes():
    choices = dict(header_choices("action_recognition"))
    assert choices == {"mobilenet": {"width_mult": 1.0}, "mobilenet_finetuned": {}}
    for model, params in choices.items():
        run = load("action_recognition", {"model.name": model, "model.params": params})
        low, high = ACTION_MODELS[model]
        assert low <= count(model, 10, **run.model.params) <= high, model


@pytest.mark.parametrize("model", SIX_MODELS)
def test_ufc10_six_models_are_sized_for_a_gpu(model):
    run = load("ufc10_six_models")
    assert list(run.task_params.get("models", SIX_MODELS)) == list(SIX_MODELS)
    n = count(model, 10, **run.task_params["model_params"])
    assert 0.7 * M <= n <= 5 * M, f"{model}: {n:,d} parameters"


def test_cifar100_resnet_is_resnet20_and_the_demo_stays_small():
    run = load("cifar100_resnet")
    assert 0.27 * M <= count(run.model.name, 100, **run.model.params) <= 0.28 * M  # He et al.'s ResNet-20
    demo = load("demo")
    assert count(demo.model.name, 100, **demo.model.params) < 0.1 * M  # the CPU demo trains in about a minute


@pytest.mark.parametrize("name", sorted(SEED_MODELS))
def test_planner_and_motion_experiments_are_the_seeds_sizes(name):
    """The vocabulary is the generated data set's default (meta.json gives it to the task)."""
    run = load(name)
    vocab, (low, high) = SEED_MODELS[name]
    assert low <= count(run.model.name, vocab, **run.model.params) <= high
    assert run.trainer.strategy == "ddp"
    assert run.trainer.precision == ("16-mixed" if name == "navsim_planner" else "auto")


def test_generated_seed_data_defaults_match_the_experiments_vocabularies():
    from cluster_train.shared.data import GENERATORS

    assert GENERATORS.params("planner_scenes")["vocab_size"] == SEED_MODELS["navsim_planner"][0]
    assert GENERATORS.params("motion_tokens")["bins"] ** 2 == SEED_MODELS["smart_motion"][0]
