"""Typed values end to end (issue 57 item 2): a Python value given to the API reaches config.yaml as that value, and a
`--set KEY=TEXT` line is typed once, by the config schema's type for its key (a free-form key: by YAML)."""
import pytest

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError

AS_STRINGS = {"name": "007", "task_params.note": "yes", "task_params.lr": "1e-3"}


def test_a_mapping_of_python_values_is_taken_as_it_is():
    run = cfg.resolve({}, AS_STRINGS)
    assert (run.name, run.task_params) == ("007", {"note": "yes", "lr": "1e-3"})


def test_set_lines_are_typed_by_the_schema_and_free_form_keys_by_yaml():
    typed = cfg.parse_settings(["name=007", "task_params.note=yes", "task_params.lr=1e-3", "trainer.max_epochs=2",
                                "trainer.gradient_clip_val=null", "optim.lr=1e-3", "trainer.precision=32",
                                "trainer.limit_val_batches=0.5", "model.params={depth: 8}"])
    assert typed == {"name": "007", "task_params.note": True, "task_params.lr": "1e-3", "trainer.max_epochs": 2,
                     "trainer.gradient_clip_val": None, "optim.lr": 0.001, "trainer.precision": "32",
                     "trainer.limit_val_batches": 0.5, "model.params": {"depth": 8}}
    assert type(typed["trainer.max_epochs"]) is int and type(typed["optim.lr"]) is float


@pytest.mark.parametrize("line, words", [
    ("trainer.max_epochs=abc", "config key 'trainer.max_epochs' = 'abc' must be int"),
    ("trainer.channels_last=sideways", "config key 'trainer.channels_last' = 'sideways' must be bool"),
    ("trainer.cuda_graphs=on", "unknown value of trainer.cuda_graphs 'on'; choose one of: auto, always, never"),
])
def test_bad_text_for_a_typed_key_is_refused_in_one_line(line, words):
    with pytest.raises(UserError) as err:
        cfg.resolve({}, [line])
    assert str(err.value) == words


def test_a_str_key_takes_its_text_as_it_is_or_inside_yaml_quotes():
    assert cfg.parse_settings(["name=007", 'name2="007"', "data.root='/a b'", 'task_params.note="yes"']) == {
        "name": "007", "name2": "007", "data.root": "/a b", "task_params.note": "yes"}


@pytest.mark.parametrize("settings", [
    {"name": "007", "task_params.tag": "007", "task_params.note": "yes", "task_params.lr": "1e-3",
     "task_params.empty": "", "task_params.quoted": '"x"', "task_params.list": [1, "2"], "trainer.max_epochs": 2,
     "optim.lr": 0.001, "trainer.gradient_clip_val": None, "data.root": "/a b=c", "task_params.off": False},
])
def test_the_text_form_reads_back_as_the_same_values(settings):
    """What the manifest records and a --set to another machine sends: KEY=TEXT lines that parse_settings types
    back as the values they came from, type and all ("007" stays a str where bare 007 would read as 7)."""
    lines = cfg.setting_lines(settings)
    back = cfg.parse_settings(lines)
    assert back == settings and {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in settings.items()}
    assert "name=007" in lines and 'task_params.tag="007"' in lines  # bare where the schema keeps the text
