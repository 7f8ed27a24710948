import time

import pytest

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError


def test_overrides_are_typed_and_dotted():
    run = cfg.resolve({"trainer": {"max_epochs": 2}},
                      ["trainer.precision=16-mixed", "optim.lr=1", "model.params={depth: 8}"])
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


def test_unknown_precision_is_one_line_naming_the_choices():
    with pytest.raises(UserError) as err:
        cfg.resolve({"trainer": {"precision": "fp8"}})
    message = str(err.value)
    assert "\n" not in message and "'fp8'" in message and "bf16-mixed" in message and "16-mixed" in message


def test_every_strategy_name_of_the_issue_is_registered():
    from cluster_train.shared.strategies import STRATEGIES

    assert {"ddp", "fsdp", "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload"} <= set(STRATEGIES.names())


def test_deepspeed_configs_are_files_and_precision_comes_from_the_trainer():
    from cluster_train.shared.config import TrainerConfig
    from cluster_train.image.strategies.builders import DEEPSPEED_CONFIGS, deepspeed_config

    assert sorted(p.stem for p in DEEPSPEED_CONFIGS.glob("*.json")) == [
        "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload"]
    stage3 = deepspeed_config("zero3_offload", TrainerConfig(flops_profiler=True))
    assert stage3["zero_optimization"]["offload_param"]["device"] == "cpu" and "bf16" not in stage3
    assert stage3["flops_profiler"]["enabled"] is True


@pytest.mark.parametrize("text", ["[" * 20_000, "{a: " * 20_000, "- " * 20_000 + "x\n",
                                  "".join(" " * i + "a:\n" for i in range(3000))])
def test_a_yaml_nested_20000_deep_is_refused_at_once(text):
    """Refused from the parser's events before anything is built: PyYAML's own scanner took seconds on 20 000 `[`."""
    from cluster_train.shared.yaml_file import load_yaml_text
    for read in (lambda: load_yaml_text(text, "x.yaml"), lambda: cfg.yaml_scalar(text)):
        started = time.monotonic()
        with pytest.raises(UserError, match="nests deeper than 64 levels; flatten it"):
            read()
        assert time.monotonic() - started < 0.5
