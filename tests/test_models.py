"""Every registered model: shapes, backward, one step lowers the loss, save/load round trip."""
import pytest

torch = pytest.importorskip("torch")

from train.models import MODELS  # noqa: E402

SMALL = {"resnet_cifar": {"depth": 8, "width": 4}}


@pytest.fixture(params=MODELS.names())
def model_name(request):
    return request.param


def build(name):
    torch.manual_seed(0)
    return MODELS.build(name, num_classes=10, **SMALL.get(name, {}))


def test_forward_backward_shapes(model_name):
    model = build(model_name)
    x = torch.randn(4, 3, 32, 32)
    out = model(x)
    assert out.shape == (4, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_one_step_lowers_loss_on_a_fixed_batch(model_name):
    model = build(model_name)
    x, y = torch.randn(8, 3, 32, 32), torch.arange(8) % 10
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(2):
        loss = torch.nn.functional.cross_entropy(model(x), y)
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
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(model(x), again.eval()(x))


def test_unknown_model_names_the_choices():
    from train.errors import UserError

    with pytest.raises(UserError, match="unknown model 'resnet_cifr'.*did you mean 'resnet_cifar'"):
        MODELS.get("resnet_cifr")
