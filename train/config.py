"""Typed run configuration: dataclasses resolved once from a YAML file plus `key=value` overrides.

Torch-free, so the host side can resolve and check a config before anything is queued. The resolved
config is saved as `config.yaml` beside the run's outputs, as timm saves its `args.yaml`.
"""
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import yaml

from train.errors import UserError
from train.registry import unknown_name


@dataclass
class ModelConfig:
    name: str = "resnet_cifar"
    params: Dict[str, Any] = field(default_factory=dict)  # constructor keyword arguments


@dataclass
class DataConfig:
    name: str = "cifar100"
    root: str = "data/cifar100"
    batch_size: int = 64  # per rank (per GPU)
    num_workers: int = 2  # per rank
    augment: bool = True
    # Host RAM estimates the preflight check budgets per node: each rank's main process, and each of its
    # dataloader workers (a worker holds its own copy of the dataset's state and prefetched batches).
    rank_mem_gb: float = 4.0
    worker_mem_gb: float = 1.0
    params: Dict[str, Any] = field(default_factory=dict)  # data-set keyword arguments (e.g. num_frames for video)


@dataclass
class OptimConfig:
    name: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    scheduler: str = "cosine"  # cosine | none


@dataclass
class TrainerConfig:
    max_epochs: int = 3
    accelerator: str = "auto"
    devices: int = 1  # per node; derived from the cluster profile when submitted through run-cluster
    num_nodes: int = 1
    strategy: str = "ddp"
    precision: str = "32"
    accumulate_grad_batches: int = 1
    gradient_clip_val: Optional[float] = None
    limit_train_batches: Optional[Union[int, float]] = None
    limit_val_batches: Optional[Union[int, float]] = None
    log_every_n_steps: int = 10
    flops_profiler: bool = False  # DeepSpeed strategies only: print DeepSpeed's FLOPS profile at step 2
    export_weights: bool = True  # at the end of fit, write models/<Model>_best_weights.pth from the best checkpoint


@dataclass
class RunConfig:
    name: str = "cifar100_resnet"
    # What `python -m train fit` runs (train/tasks): classify (one model, the default), video_suite,
    # cifar_experts, cifar_fusion, ...; task_params are that task's own options.
    task: str = "classify"
    task_params: Dict[str, Any] = field(default_factory=dict)
    seed: int = 42
    output_dir: str = "runs/local"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


def load(path: Union[str, Path], overrides: Union[Mapping[str, Any], List[str], None] = None) -> RunConfig:
    """Read a YAML config file and apply overrides ({"trainer.max_epochs": 2} or ["trainer.max_epochs=2"])."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {str(path)!r} does not exist; pass the path of a YAML run config")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"config file {str(path)!r} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise UserError(f"config file {str(path)!r} must hold a mapping at the top level")
    return resolve(raw, overrides)


def resolve(raw: Mapping[str, Any], overrides: Union[Mapping[str, Any], List[str], None] = None) -> RunConfig:
    merged = _deep_copy(raw)
    for key, value in parse_overrides(overrides).items():
        _set_dotted(merged, key, value)
    run = _build(RunConfig, merged, "")
    from train.strategies import check_precision  # torch-free

    run.trainer.precision = check_precision(run.trainer.precision)
    return run


INPUT_KEY_SUFFIXES = ("_dir", "_path")  # in task_params, model.params, data.params: a path the job reads


def input_paths(run: RunConfig) -> Dict[str, str]:
    """Every host path a run reads, by dotted key: data.root, and each `*_dir` / `*_path` value in task_params,
    model.params and data.params (expert checkpoints, pretrained weights). run-cluster makes them absolute, checks
    they exist before anything is queued, and binds them read-only into the container."""
    found = {"data.root": run.data.root}
    for section, params in (("task_params", run.task_params), ("model.params", run.model.params),
                            ("data.params", run.data.params)):
        for key, value in params.items():
            if isinstance(value, str) and value and key.endswith(INPUT_KEY_SUFFIXES):
                found[f"{section}.{key}"] = value
    return found


def parse_overrides(overrides: Union[Mapping[str, Any], List[str], None]) -> Dict[str, Any]:
    """`["a.b=1", "c=x"]` -> {"a.b": 1, "c": "x"}; values are read as YAML scalars (2 -> int, true -> bool)."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return dict(overrides)
    parsed = {}
    for item in overrides:
        key, sep, text = str(item).partition("=")
        if not sep or not key:
            raise UserError(f"override {item!r} is not key=value; write it like trainer.max_epochs=5")
        parsed[key.strip()] = yaml_scalar(text)
    return parsed


def yaml_scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def to_dict(config: RunConfig) -> Dict[str, Any]:
    return dataclasses.asdict(config)


def dump(config: RunConfig, path: Union[str, Path]) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))


def _build(cls, raw: Mapping[str, Any], prefix: str):
    if not isinstance(raw, Mapping):
        raise UserError(f"config key {prefix.rstrip('.')!r} must be a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            raise UserError(unknown_name("config key", prefix + str(key), [prefix + n for n in names]))
    values = {}
    for name in names:
        if name not in raw:
            continue
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, raw[name] or {}, f"{prefix}{name}.")
        else:
            values[name] = _coerce(raw[name], hint, prefix + name)
    return cls(**values)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Union:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is not type(None):
                try:
                    return _coerce(value, option, key)
                except UserError:
                    continue
        raise UserError(f"config key {key!r} = {value!r} must be one of {_type_names(options)}")
    if origin in (dict, Dict):
        if not isinstance(value, Mapping):
            raise UserError(f"config key {key!r} = {value!r} must be a mapping")
        return dict(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # precision: 32 -> "32"
    if hint is Any or (isinstance(value, hint) and not (hint is int and isinstance(value, bool))):
        return value
    raise UserError(f"config key {key!r} = {value!r} must be {_type_names([hint])}")


def _type_names(types) -> str:
    return " or ".join(getattr(t, "__name__", str(t)) for t in types if t is not type(None))


def _set_dotted(tree: Dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise UserError(f"override {dotted!r}: {part!r} is not a section")
        node = child
    node[leaf] = value


def _deep_copy(tree: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in tree.items()}
