"""Typed run configuration: dataclasses resolved once from a YAML file plus `key=value` overrides.

Torch-free, so the host side can resolve and check a config before anything is queued. The resolved
config is saved as `config.yaml` beside the run's outputs, as timm saves its `args.yaml`.
"""
import dataclasses
import functools
import json
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import yaml

from cluster_train.shared.checkpoint_every import interval as checkpoint_interval
from cluster_train.shared.errors import UserError, raise_all
from cluster_train.shared.registry import unknown_name
from cluster_train.shared.tracker_config import TrackerConfig, check as check_tracker, normalize as normalize_tracker
from cluster_train.shared.yaml_file import MAX_DEPTH, check_bounds, check_depth, load_yaml


@dataclass
class ModelConfig:
    name: str = "resnet_cifar"
    params: Dict[str, Any] = field(default_factory=dict)  # constructor keyword arguments


@dataclass
class DataConfig:
    name: str = "cifar100"
    root: str = "data/cifar100"
    # a packed data set (bin/run-cluster data pack): its name or sha256 in the data store; the job binds that
    # SquashFS image read-only at `root`, where the data module reads as from a directory
    image: str = ""
    batch_size: int = field(default=64, metadata={"min": 1})  # per rank (per GPU)
    num_workers: int = field(default=2, metadata={"min": 0})  # per rank
    prefetch_factor: int = field(default=4, metadata={"min": 1})  # batches each worker loads ahead (with workers)
    augment: bool = True
    # Host RAM estimates the preflight check budgets per node: each rank's main process, and each of its
    # dataloader workers (a worker holds its own copy of the dataset's state and prefetched batches).
    rank_mem_gb: float = field(default=4.0, metadata={"min": 0})
    worker_mem_gb: float = field(default=1.0, metadata={"min": 0})
    params: Dict[str, Any] = field(default_factory=dict)  # data-set keyword arguments (e.g. num_frames for video)


@dataclass
class OptimConfig:
    name: str = "sgd"
    lr: float = field(default=0.05, metadata={"above": 0})
    momentum: float = field(default=0.9, metadata={"min": 0})
    weight_decay: float = field(default=5e-4, metadata={"min": 0})
    scheduler: str = "cosine"  # cosine | none


@dataclass
class TrainerConfig:
    max_epochs: int = field(default=3, metadata={"min": 1})
    accelerator: str = field(default="auto", metadata={"choices": ("auto", "cpu", "gpu", "cuda")})
    # per node; derived from the cluster profile when submitted through run-cluster
    devices: int = field(default=1, metadata={"min": 1})
    num_nodes: int = field(default=1, metadata={"min": 1})
    strategy: str = "ddp"
    precision: str = "auto"  # auto: bf16-mixed on GPUs that have bf16 (Ampere and newer), else 32
                             # (cluster_train/image/speed.py)
    # convolution weights channels-last on GPUs (Tensor Cores take NHWC without transposes); the CPU keeps NCHW
    channels_last: bool = True
    # torch.compile the model (single and ddp; cluster_train.image.strategies.check_compile says why not others)
    compile: bool = False
    # CUDA graphs (torch.compile mode reduce-overhead) for steps bound by kernel launches: auto tries them where the
    # first steps' timing shows the GPU waiting for the host (cluster_train/image/cuda_graphs.py); always | never
    cuda_graphs: str = field(default="auto", metadata={"choices": ("auto", "always", "never")})
    accumulate_grad_batches: int = field(default=1, metadata={"min": 1})
    gradient_clip_val: Optional[float] = field(default=None, metadata={"min": 0})
    limit_train_batches: Optional[Union[int, float]] = field(default=None, metadata={"min": 0})
    limit_val_batches: Optional[Union[int, float]] = field(default=None, metadata={"min": 0})
    # Lightning's own default: each logged step costs ~3.5 ms of Lightning's bookkeeping and two loggers' writes on
    # a 2-core VM (benchmarks/README.md, the loop's overhead); experiments that want denser curves say so (demo: 5)
    log_every_n_steps: int = field(default=50, metadata={"min": 1})
    flops_profiler: bool = False  # DeepSpeed strategies only: print DeepSpeed's FLOPS profile at step 2
    export_weights: bool = True  # at the end of fit, write models/<Model>_best_weights.pth from the best checkpoint
    # mid-epoch saves of the checkpoint a run resumes from: 500 (steps), 90s/20m/2h, null: off (shared/checkpoint_every)
    checkpoint_every: Any = None


@dataclass
class RunConfig:
    name: str = field(default="cifar100_resnet", metadata={"pattern": r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}"})
    # What `python -m train fit` runs (cluster_train/image/tasks): classify (one model, the default), video_suite,
    # cifar_experts, cifar_fusion, ...; task_params are that task's own options.
    task: str = "classify"
    task_params: Dict[str, Any] = field(default_factory=dict)
    seed: int = field(default=42, metadata={"min": 0})
    output_dir: str = "runs/local"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)  # where metrics go besides metrics.csv
    # Your own training code (cluster_train/image/command.py): `command` runs inside the image, from a snapshot of the
    # `code` directory taken at submission, instead of `task`. `code` without a command runs the task from that code's
    # own cluster_train package over the image's (run-cluster --dev). `reads` names the keys of your own YAML config
    # that mean what preflight checks: devices, num_nodes, num_workers, batch_size, precision, accumulate_grad_batches,
    # data_root, and `file` (default: the command's first .yaml argument).
    command: List[str] = field(default_factory=list)
    code: str = ""
    reads: Dict[str, str] = field(default_factory=dict)
    # a one-rank command run as `python train.py` runs, without RANK, WORLD_SIZE, ... (run-cluster --standalone)
    standalone: bool = False


def load(path: Union[str, Path], overrides: Union[Mapping[str, Any], List[str], None] = None) -> RunConfig:
    """Read a YAML config file and apply overrides: a mapping of typed values ({"trainer.max_epochs": 2}, taken as
    they are) or `KEY=TEXT` lines (["trainer.max_epochs=2"], typed by the schema: parse_settings)."""
    return resolve(read(path), overrides)


def read(path: Union[str, Path]) -> Dict[str, Any]:
    """A YAML run config file's mapping, unresolved."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {str(path)!r} does not exist; pass the path of a YAML run config")
    raw = load_yaml(path, "config file") or {}
    if not isinstance(raw, dict):
        raise UserError(f"config file {str(path)!r} must hold a mapping at the top level")
    return raw


def resolve(raw: Mapping[str, Any], overrides: Union[Mapping[str, Any], List[str], None] = None) -> RunConfig:
    """The typed config of a raw mapping with overrides on top (a mapping of typed values, or `KEY=TEXT` lines)."""
    merged = _deep_copy(raw)
    for key, value in parse_settings(overrides).items():
        _set_dotted(merged, key, value)
    if "tracker" in merged:
        merged["tracker"] = normalize_tracker(merged["tracker"])
    run = _build(RunConfig, merged, "")
    from cluster_train.shared.strategies import check_compile, check_precision  # torch-free

    run.trainer.precision = check_precision(run.trainer.precision)
    check_compile(run.trainer.strategy, run.trainer.compile, run.trainer.cuda_graphs)
    checkpoint_interval(run.trainer.checkpoint_every)
    check_tracker(run.tracker)
    return run


INPUT_KEY_SUFFIXES = ("_dir", "_path")  # in task_params, model.params, data.params: a path the job reads


def input_paths(run: RunConfig) -> Dict[str, str]:
    """Every host path a run reads, by dotted key: data.root, and each `*_dir` / `*_path` value in task_params,
    model.params and data.params (expert checkpoints, pretrained weights). run-cluster makes them absolute, checks
    they exist before anything is queued, and binds them read-only into the container. With data.image, data.root
    is where the image is mounted in the container, not a host path."""
    found = {"data.root": run.data.root} if run.data.root and not run.data.image else {}  # a command's may be none
    for section, params in (("task_params", run.task_params), ("model.params", run.model.params),
                            ("data.params", run.data.params)):
        for key, value in params.items():
            if isinstance(value, str) and value and key.endswith(INPUT_KEY_SUFFIXES):
                found[f"{section}.{key}"] = value
    return found


def set_value(run: RunConfig, dotted: str, value: Any) -> None:
    """Set one already-checked value of a resolved config by its dotted key (a field, or a key of a params dict)."""
    *parents, leaf = dotted.split(".")
    node: Any = run
    for part in parents:
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    if isinstance(node, dict):
        node[leaf] = value
    else:
        setattr(node, leaf, value)


def parse_settings(lines: Union[Mapping[str, Any], List[str], None]) -> Dict[str, Any]:
    """`["a.b=1", "name=007"]` -> {"a.b": 1, "name": "007"}: each `KEY=TEXT` line typed once by typed_setting. A
    mapping holds typed values already (the Python API's): taken as it is, nothing rendered to text and read back."""
    if lines is None:
        return {}
    if isinstance(lines, Mapping):
        return dict(lines)
    parsed = {}
    for item in lines:
        key, sep, text = str(item).partition("=")
        if not sep or not key:
            raise UserError(f"override {item!r} is not key=value; write it like trainer.max_epochs=5")
        parsed[key.strip()] = typed_setting(key.strip(), text)
    return parsed


def setting_lines(settings: Mapping[str, Any]) -> List[str]:
    """The text form of typed settings, for the manifest and for a --set sent to another machine: `KEY=TEXT` lines
    that parse_settings reads back as the same values. A str is written as it is where that reads back as itself,
    else JSON-quoted ("007" for a free-form key, whose bare 007 YAML would read as 7); any other value as JSON."""
    return [f"{key}={setting_text(key, value)}" for key, value in settings.items()]


def setting_text(key: str, value: Any) -> str:
    if isinstance(value, str) and (_same(typed_setting(key, value), value) or _holds_no_text(schema_type(key))):
        return value  # a key typed int or float reads its text as a number either way ("0.5" and 0.5 alike)
    return json.dumps(value)


def _holds_no_text(hint: Any) -> bool:
    return hint is not None and str not in (typing.get_args(hint) or (hint,))


def _same(read: Any, value: Any) -> bool:
    return type(read) is type(value) and read == value


def typed_setting(key: str, text: str) -> Any:
    """A `--set KEY=TEXT` value typed by the schema's type for the dotted key. A str key keeps the text as it is
    (name=007 stays "007"), or the text inside YAML's quotes ('...' or "...", as a JSON string is), so that every
    str value has a line that reads back as itself. An int, float or bool key (or an Optional/Union of them) reads
    the text as a YAML scalar and takes the first type it fits (null: None where None is allowed); a text that fits
    none is left for resolve() to refuse in one line, beside every other bad value. A free-form key (inside
    task_params, model.params, data.params or reads, a key typed Any, Dict or List, a section, an unknown key) has
    no schema type that says more: it is read as YAML, as before (2 -> int, true -> bool, [a, b] -> a list)."""
    hint = schema_type(key)
    if hint is str and not _quoted(text):
        return text
    value = yaml_scalar(text)
    if hint is str:
        return value if isinstance(value, str) else text
    if hint is None:
        return value
    try:
        return _coerce(value, hint, key)
    except UserError:
        return value


def _quoted(text: str) -> bool:
    return len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""


@functools.lru_cache(maxsize=None)  # a sweep's thousand elements type the same keys
def schema_type(key: str) -> Any:
    """The type RunConfig declares for a dotted key, or None for a free-form one (no field, a mapping, a list, Any,
    a section)."""
    node: Any = RunConfig
    for part in key.split("."):
        if not dataclasses.is_dataclass(node):
            return None
        hint = typing.get_type_hints(node).get(part)
        if hint is None:
            return None
        node = hint
    if dataclasses.is_dataclass(node) or node is Any or typing.get_origin(node) in (dict, Dict, list, List):
        return None
    return node


def yaml_scalar(text: str) -> Any:
    """A --set value as YAML reads it (a number, a list...), else the text itself; bounded as every YAML file is."""
    shown = f"--set value {text[:40]!r}" + ("..." if len(text) > 40 else "")
    check_depth(text, shown)
    try:
        value = yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text
    except RecursionError:
        raise UserError(f"{shown} nests deeper than {MAX_DEPTH} levels; flatten it") from None
    check_bounds(value, shown)
    return value


def to_dict(config: RunConfig) -> Dict[str, Any]:
    return dataclasses.asdict(config)


def dump(config: RunConfig, path: Union[str, Path]) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))


def _build(cls, raw: Mapping[str, Any], prefix: str, errors: Optional[List[UserError]] = None):
    """The dataclass from its mapping; every bad key or value is collected, and all are raised at once."""
    top = errors is None
    errors = [] if top else errors
    if not isinstance(raw, Mapping):
        raise UserError(f"config key {prefix.rstrip('.')!r} must be a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key in raw:
        if key not in fields:
            errors.append(UserError(unknown_name("config key", prefix + str(key), [prefix + n for n in fields])))
    for name, f in fields.items():
        if name not in raw:
            continue
        try:
            if dataclasses.is_dataclass(hints[name]):
                values[name] = _build(hints[name], raw[name] or {}, f"{prefix}{name}.", errors)
            elif "choices" in f.metadata and not isinstance(raw[name], str):  # YAML's on/off/yes arrive as bools
                raise UserError(unknown_name(f"value of {prefix}{name}", raw[name], list(f.metadata["choices"])))
            else:
                values[name] = _in_range(_coerce(raw[name], hints[name], prefix + name), f.metadata, prefix + name)
        except UserError as err:
            errors.append(err)
    if top:
        raise_all(errors)
    return None if errors else cls(**values)


def _in_range(value: Any, meta: Mapping[str, Any], key: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"config key {key!r} = {value!r} must be a finite number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "min" in meta and value < meta["min"]:
            raise UserError(f"config key {key!r} = {value!r} must be at least {meta['min']}")
        if "above" in meta and value <= meta["above"]:
            raise UserError(f"config key {key!r} = {value!r} must be greater than {meta['above']}")
    if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UserError(f"config key {key!r} = {value[:60]!r} holds a newline or control character; remove it")
    if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
        raise UserError(f"config key {key!r} = {value[:60]!r} must be 1-100 letters, digits, '_', '.', '+' or '-'")
    if "choices" in meta and value not in meta["choices"]:
        raise UserError(unknown_name(f"value of {key}", value, list(meta["choices"])))
    return value


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
        raise UserError(f"config key {key!r} = {value!r} must be {_type_names(options)}")
    if origin in (dict, Dict):
        if not isinstance(value, Mapping):
            raise UserError(f"config key {key!r} = {value!r} must be a mapping")
        return dict(value)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"config key {key!r} = {value!r} must be a list, like [python, train.py]")
        return [_coerce(item, typing.get_args(hint)[0], f"{key}[{i}]") for i, item in enumerate(value)]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot), nan and inf as text
        try:
            return float(value)
        except ValueError:
            pass
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
