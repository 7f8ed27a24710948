"""Every registered model: shapes, backward, one step lowers the loss, save/load round trip. Classifiers take random
inputs and labels; the planner and the motion-token model bring their own example batch and loss (describes_inputs)."""
import pytest

torch = pytest.importorskip("torch")

from cluster_train.image.models.examples import example_batch, training_loss  # noqa: E402
from cluster_train.shared.models import MODELS  # noqa: E402

# make test runs this module inside the image (test_in_image.py), by the torch and torchvision jobs use, and
# not again here; make test-fast runs it here
pytestmark = pytest.mark.image_copy

# models whose defaults are the seeds' real sizes (experiments/*.yaml), shrunk here
SMALL = {"resnet_cifar": {"depth": 8, "width": 4},
         "hydra_mdp": {"dim": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 1},
         "smart": {"dim": 16, "heads": 2, "layers": 1}}
PARAMETER_COUNTS = {}  # name -> count at 10 classes, printed by the last test (pytest -s) for the record


@pytest.fixture(params=MODELS.names())
def model_name(request):
    return request.param


TORCHVISION_MODELS = {"mobilenet", "mobilenet_finetuned", "efficientnet", "vgg"}


def build(name):
    if name in TORCHVISION_MODELS:
        pytest.importorskip("torchvision")  # only the image has it (Debian's build); the registry imports without it
    torch.manual_seed(0)
    params = dict(SMALL.get(name, {}))
    if name == "mobilenet_finetuned":
        params["weights_path"] = _pretend_pretrained_weights()
    model = MODELS.build(name, num_classes=10, **params)
    PARAMETER_COUNTS[name] = sum(p.numel() for p in model.parameters())
    return model


def _pretend_pretrained_weights():
    """A stand-in for torchvision's ImageNet file (same architecture, random values): no network in tests."""
    import tempfile
    from pathlib import Path

    from torchvision.models import mobilenet_v3_small

    path = Path(tempfile.gettempdir()) / "ct-test-mobilenet_v3_small.pth"
    if not path.is_file():
        torch.manual_seed(1)
        torch.save(mobilenet_v3_small().state_dict(), path)
    return str(path)


def batch(name, n):
    """n example inputs shaped as the model takes them ((n, C, H, W) images, (n, T, C, H, W) clips, a planner's scene
    and ego status, motion tokens) and their targets."""
    return example_batch(name, n, num_classes=10)


def outputs(out):
    """A model's output tensors: one for a classifier, one per head for the planner."""
    return list(out.values()) if isinstance(out, dict) else [out]


def test_forward_backward_shapes(model_name):
    model = build(model_name)
    x, y = batch(model_name, 4)
    out = model(*x)
    for scores in outputs(out):  # n samples first, a score per class (candidate, token) last
        assert scores.shape[0] == 4 and scores.shape[-1] == 10
    training_loss(model_name)(out, y).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_one_step_lowers_loss_on_a_fixed_batch(model_name):
    model = build(model_name)
    x, y = batch(model_name, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(2):
        torch.manual_seed(0)  # the same dropout / stochastic-depth masks both times: one function of the weights
        loss = training_loss(model_name)(model(*x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[1] < losses[0]


def test_save_load_round_trip(model_name, tmp_path):
    model = build(model_name).eval()
    torch.save(model.state_dict(), tmp_path / "w.pth")
    again = build(model_name)
    again.load_state_dict(torch.load(tmp_path / "w.pth"))
    x, _ = batch(model_name, 2)
    for first, second in zip(outputs(model(*x)), outputs(again.eval()(*x))):
        assert torch.equal(first, second)


def test_parameter_count_is_recorded(model_name):
    count = sum(p.numel() for p in build(model_name).parameters())
    assert 0 < count < 5_000_000, "default params must stay small so CPU tests are fast"
    print(f"{model_name}: {count:,d} parameters")


def test_unknown_model_names_the_choices():
    from cluster_train.shared.errors import UserError

    with pytest.raises(UserError, match="unknown model 'resnet_cifr'.*did you mean 'resnet_cifar'"):
        MODELS.get("resnet_cifr")


def test_finetuned_model_without_its_weights_file_is_a_one_line_error(tmp_path):
    from cluster_train.shared.errors import UserError

    with pytest.raises(UserError, match=r"pretrained weights file .*absent\.pth is missing; .*weights_path") as err:
        MODELS.build("mobilenet_finetuned", num_classes=10, weights_path=str(tmp_path / "absent.pth"))
    assert "\n" not in str(err.value)


def test_registry_imports_and_lists_every_family_without_torchvision():
    names = set(MODELS.names())
    assert {"PerFrameAggregation2D", "EarlyFusion3D", "densenet_cifar", "improved_wide_resnet", "resnext_cifar",
            "mobilenet", "mobilenet_finetuned", "efficientnet", "basic_cnn", "vgg", "cnn_lstm", "ensemble",
            "hydra_mdp", "smart"} <= names
