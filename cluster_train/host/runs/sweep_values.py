"""A sweep's values: the axes --sweep gives as words, a --sweep-file's runs and the API's {key: values}, combined
into elements (each a mapping of keys to values); and the text form of typed values, which the sweep's records and
its summary show where no words were typed."""
import itertools
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.shared.yaml_file import load_yaml
from cluster_train.host import undecodable


def parse_axes(specs: List[str]) -> List[Tuple[str, List[str]]]:
    """["model.name=a,b", "optim.lr=0.1,0.01"] -> [("model.name", ["a", "b"]), ("optim.lr", ["0.1", "0.01"])]: the
    words as typed (each element's are typed once, by the schema, as --set's are: sweep.prepare_sweep)."""
    axes: Dict[str, List[str]] = {}
    for spec in specs:
        undecodable.refuse_setting("--sweep", spec)  # the API's sweeps, as the command line's parser refuses them
        key, sep, text = spec.partition("=")
        values = [v.strip() for v in text.split(",")]
        if not sep or not key.strip() or not all(values):
            raise UserError(f"--sweep {spec!r} is not KEY=V1,V2,...; write it like --sweep optim.lr=0.1,0.01")
        if key.strip() in axes:
            raise UserError(f"--sweep {key.strip()} is given twice; list all its values in one --sweep")
        axes[key.strip()] = values
    return list(axes.items())


def read_sweep_file(path: str) -> List[Dict[str, Any]]:
    """A YAML list of runs, each a mapping of config keys to values (or `runs:` holding that list), e.g.
    `- {model.name: resnet_cifar, optim.lr: 0.1}`; the values as YAML typed them ('007' stays a str)."""
    loaded = load_yaml(path, "--sweep-file")  # bounded: a sweep file is data a user may have generated
    listed = loaded.get("runs") if isinstance(loaded, dict) else loaded
    if not isinstance(listed, list) or not listed or not all(isinstance(r, dict) and r for r in listed):
        raise UserError(f"--sweep-file {path} must list runs, each a mapping of keys to values: "
                        f"- {{model.name: resnet_cifar, optim.lr: 0.1}}")
    return [{str(k): v for k, v in run.items()} for run in listed]


def axes_of(settings: List[Dict[str, Any]]) -> List[Tuple[str, List[Any]]]:
    """Each key the runs set and its distinct values, in the order they first appear."""
    axes: Dict[str, List[str]] = {}
    for setting in settings:
        for key, value in setting.items():
            axes.setdefault(key, [])
            if value not in axes[key]:
                axes[key].append(value)
    return list(axes.items())


def combinations(axes: List[Tuple[str, List[Any]]]) -> List[Dict[str, Any]]:
    """The product of the values, the last key varying fastest."""
    keys = [key for key, _ in axes]
    return [dict(zip(keys, values)) for values in itertools.product(*(values for _, values in axes))]


def axes_given(axes: Mapping[str, Sequence[Any]]) -> List[Tuple[str, List[Any]]]:
    """The API's {key: values} as --sweep gives them, each value the Python value it is."""
    if not axes or not all(isinstance(values, Sequence) and not isinstance(values, str) and values
                           for values in axes.values()):
        raise UserError(f"sweep axes {dict(axes)!r} must map each key to a list of values, e.g. "
                        f"{{'optim.lr': [0.1, 0.01]}}")
    return [(key, list(values)) for key, values in axes.items()]


def texts_of(setting: Dict[str, Any]) -> Dict[str, str]:
    return {key: cfg.setting_text(key, value) for key, value in setting.items()}
