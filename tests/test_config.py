import pytest

from train import config as cfg
from train.errors import UserError


def test_overrides_are_typed_and_dotted():
    run = cfg.resolve({"trainer": {"max_epochs": 2}}, ["trainer.precision=16-mixed", "optim.lr=1", "model.params={depth: 8}"])
    assert run.trainer.max_epochs == 2
    assert run.trainer.precision == "16-mixed"
    assert run.optim.lr == 1.0 and isinstance(run.optim.lr, float)
    assert run.model.params == {"depth": 8}


def test_numeric_precision_becomes_text():
    assert cfg.resolve({"trainer": {"precision": 32}}).trainer.precision == "32"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer.max_epoch=2"], "did you mean 'trainer.max_epochs'"),
        (["trainer.max_epochs=abc"], "'trainer.max_epochs' = 'abc' must be int"),
        (["trainer.max_epochs=true"], "must be int"),
        (["novalue"], "is not key=value"),
        (["data=3"], "'data' must be a mapping"),
    ],
)
def test_bad_overrides_name_the_value_and_the_fix(overrides, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg.resolve({}, overrides)


def test_round_trip_through_yaml(tmp_path):
    run = cfg.resolve({"name": "x", "data": {"batch_size": 7}})
    cfg.dump(run, tmp_path / "c.yaml")
    assert cfg.load(tmp_path / "c.yaml") == run


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        cfg.load(tmp_path / "nope.yaml")
