"""A search file (`run-cluster CLUSTER PROFILE EXPERIMENT --search FILE.yaml`), read and checked whole before Optuna
is imported or anything is queued:

    space:                                   # config keys, as --set names them
      optim.lr: {log_uniform: [1.0e-4, 1.0e-1]}
      optim.weight_decay: {uniform: [0.0, 1.0e-3]}
      model.params.width: {int: [8, 32]}
      optim.name: {choice: [sgd, adamw]}
    objective: {metric: val/acc, direction: maximize}   # a metrics.csv column or a results.json key
    trials: 12
    sampler: {tpe: {seed: 42, n_startup_trials: 4}}     # tpe (default) or random; seed: the experiment's by default
    pruner: {median: {n_startup_trials: 3}}             # median, hyperband or none (default)

Every problem is one line naming the bad value and the fix."""
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.shared.yaml_file import load_yaml

KINDS = ("log_uniform", "uniform", "int", "choice")
SAMPLERS = {"tpe": ("seed", "n_startup_trials"), "random": ("seed",)}
PRUNERS = {"median": ("n_startup_trials", "n_warmup_steps", "interval_steps"),
           "hyperband": ("min_resource", "reduction_factor"), "none": ()}
DIRECTIONS = ("maximize", "minimize")
KEYS = ("space", "objective", "trials", "sampler", "pruner")


@dataclass(frozen=True)
class Param:
    key: str
    kind: str  # one of KINDS
    low: float = 0.0
    high: float = 0.0
    choices: Tuple[Any, ...] = ()

    def probes(self) -> List[Any]:
        """The values that check the key as --set would: both ends of a range, every choice."""
        if self.kind == "choice":
            return list(self.choices)
        return [int(self.low), int(self.high)] if self.kind == "int" else [self.low, self.high]

    def shown(self) -> str:
        if self.kind == "choice":
            return f"{self.key} one of {', '.join(map(str, self.choices))}"
        return f"{self.key} {self.kind.replace('_', '-')} [{self.low:g}, {self.high:g}]"


@dataclass(frozen=True)
class SearchSpec:
    space: Tuple[Param, ...]
    metric: str
    direction: str
    trials: int
    sampler: str = "tpe"
    sampler_args: Dict[str, int] = field(default_factory=dict)
    pruner: str = "none"
    pruner_args: Dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        """The file's content as study.json records it (and read_spec reads back)."""
        return {"space": {p.key: {p.kind: list(p.choices) if p.kind == "choice" else [p.low, p.high]}
                          for p in self.space},
                "objective": {"metric": self.metric, "direction": self.direction}, "trials": self.trials,
                "sampler": {self.sampler: dict(self.sampler_args)}, "pruner": {self.pruner: dict(self.pruner_args)}}


def read_spec_file(path: str) -> SearchSpec:
    return read_spec(load_yaml(path, "--search"), f"--search {path}")


def read_spec(loaded: Any, where: str = "search") -> SearchSpec:
    if not isinstance(loaded, dict):
        raise UserError(f"{where} must be a mapping with space:, objective: and trials:")
    unknown = sorted(set(map(str, loaded)) - set(KEYS))
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}; a search file holds {', '.join(KEYS)}")
    space = read_space(loaded.get("space"), where)
    metric, direction = read_objective(loaded.get("objective"), where)
    sampler, sampler_args = named_choice(loaded.get("sampler", "tpe"), SAMPLERS, "sampler", where)
    pruner, pruner_args = named_choice(loaded.get("pruner", "none"), PRUNERS, "pruner", where)
    return SearchSpec(space, metric, direction, read_trials(loaded.get("trials"), where), sampler, sampler_args,
                      pruner, pruner_args)


def read_space(space: Any, where: str) -> Tuple[Param, ...]:
    if not isinstance(space, dict) or not space:
        raise UserError(f"{where}: the space is empty; give space: with at least one key, e.g. "
                        f"space: {{optim.lr: {{log_uniform: [1.0e-4, 1.0e-1]}}}}")
    errors, params = [], []
    for key, value in space.items():
        try:
            params.append(read_param(str(key), value, where))
        except UserError as err:
            errors.append(err)
    raise_all(errors)
    return tuple(params)


def read_param(key: str, value: Any, where: str) -> Param:
    example = f"{key}: {{log_uniform: [1.0e-4, 1.0e-1]}} (or uniform, int, choice)"
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in KINDS:
        raise UserError(f"{where}: space {key}: {value!r} is not one of {', '.join(KINDS)}; write {example}")
    kind, bounds = next(iter(value.items()))
    if kind == "choice":
        if not isinstance(bounds, list) or not bounds or len(set(map(repr, bounds))) != len(bounds):
            raise UserError(f"{where}: space {key}: choice {bounds!r} must list distinct values, e.g. "
                            f"{key}: {{choice: [sgd, adamw]}}")
        return Param(key, kind, choices=tuple(bounds))
    numbers = isinstance(bounds, list) and len(bounds) == 2 and all(
        isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds)
    if not numbers or (kind == "int" and not all(isinstance(b, int) for b in bounds)):
        raise UserError(f"{where}: space {key}: {kind} {bounds!r} must be [low, high], two finite "
                        f"{'integers' if kind == 'int' else 'numbers'}")
    low, high = bounds
    if low >= high:
        raise UserError(f"{where}: space {key}: {kind} low {low} is not below high {high}; give [low, high] with "
                        f"low < high")
    if kind == "log_uniform" and low <= 0:
        raise UserError(f"{where}: space {key}: log_uniform low {low} must be above 0; use uniform for ranges that "
                        f"reach 0")
    return Param(key, kind, float(low) if kind != "int" else low, float(high) if kind != "int" else high)


def read_objective(objective: Any, where: str) -> Tuple[str, str]:
    if not isinstance(objective, dict) or not isinstance(objective.get("metric"), str) or not objective["metric"]:
        raise UserError(f"{where}: objective {objective!r} must name a metric and a direction, e.g. "
                        f"objective: {{metric: val/acc, direction: maximize}}")
    direction = objective.get("direction")
    if direction not in DIRECTIONS or set(objective) - {"metric", "direction"}:
        raise UserError(f"{where}: objective direction {direction!r} must be maximize or minimize "
                        f"(objective: {{metric: {objective['metric']}, direction: maximize}})")
    return objective["metric"], direction


def read_trials(trials: Any, where: str) -> int:
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise UserError(f"{where}: trials {trials!r} must be a whole number of trials, 1 or more (trials: 12)")
    return trials


def named_choice(value: Any, known: Dict[str, Tuple[str, ...]], what: str, where: str) -> Tuple[str, Dict]:
    """`tpe` or `{tpe: {seed: 1}}`: the name and its whole-number arguments."""
    name, args = (value, {}) if isinstance(value, str) else (next(iter(value.items())) if isinstance(value, dict)
                                                               and len(value) == 1 else (None, None))
    if name not in known or not isinstance(args, (dict, type(None))):
        raise UserError(f"{where}: {what} {value!r} is not one of {', '.join(known)}; write e.g. "
                        f"{what}: {{{next(iter(known))}: {{}}}}")
    args = args or {}
    for key, number in args.items():
        if key not in known[name] or not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise UserError(f"{where}: {what} {name}: {key}: {number!r} is not one of its whole-number settings "
                            f"({', '.join(known[name]) or 'it takes none'})")
    return name, dict(args)


def as_override(value: Any) -> str:
    """A sampled value as --set takes it (text as is; numbers in full precision, so the run is what was asked)."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def first_metric_problem(metric: str, logged: Optional[Dict[str, Tuple[str, ...]]], task: str) -> Optional[str]:
    """The line refusing an objective the task does not log (None: it does)."""
    if logged is None:
        return f"objective metric {metric!r}: task {task} has no known metrics to search on; search a classify " \
               f"experiment"
    if metric in logged["metrics.csv"] or metric in logged["results.json"]:
        return None
    names = ", ".join(logged["metrics.csv"] + logged["results.json"])
    return f"objective metric {metric!r} is not logged by task {task}; name one of {names}"
