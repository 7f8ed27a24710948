"""The one place Optuna is imported: a study's storage, sampler, pruner and distributions from its record
(study.json). Only the driver and the study report need Optuna; `status` and `runs` read trials.json, which the
driver writes, so a login node's plain python3 still lists a study."""
import os
from typing import Any, Dict, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.search.spec import SearchSpec, read_spec

NEEDED = "python3 -m pip install --user 'optuna>=4'"


def optuna_module():
    try:
        import optuna
    except ImportError:
        raise UserError(f"--search needs Optuna on this machine, which has none; install it: {NEEDED}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the driver says what happens, in its own lines
    return optuna


def storage_url(record: Dict[str, Any]) -> str:
    """The storage's URL as Optuna takes it: the study's SQLite file, or the settings' PostgreSQL URL with the password
    read now from the variable the settings name (never written anywhere)."""
    storage = record["storage"]
    if storage.get("password_env"):
        name = storage["password_env"]
        if name not in os.environ:
            raise UserError(f"the study's storage takes its password from ${name}, which is not set here; export it")
        scheme, rest = storage["url"].split("://", 1)
        user, host = rest.split("@", 1)
        from urllib.parse import quote

        return f"{scheme}://{user}:{quote(os.environ[name], safe='')}@{host}"
    return storage["url"]


def open_study(record: Dict[str, Any], create: bool = False):
    """The study, its sampler seeded by the seed and the trials already asked: a restarted driver does not draw the
    first driver's random startup points again."""
    optuna = optuna_module()
    spec = read_spec(record["spec"], "study.json")
    url = storage_url(record)
    name = record["study_id"]
    asked = 0 if create else len(optuna.load_study(study_name=name, storage=url).trials)
    return optuna.create_study(study_name=name, storage=url, direction=spec.direction, load_if_exists=not create,
                               sampler=sampler(optuna, spec, asked), pruner=pruner(optuna, spec, record))


def sampler(optuna, spec: SearchSpec, asked: int):
    args = dict(spec.sampler_args)
    args["seed"] = args.get("seed", 0) + asked
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(**args)
    return optuna.samplers.TPESampler(**args)  # constant_liar by default: a batch's trials differ from each other


def pruner(optuna, spec: SearchSpec, record: Dict[str, Any]):
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(**spec.pruner_args)
    if spec.pruner == "hyperband":  # one resource unit per validation: an epoch
        return optuna.pruners.HyperbandPruner(max_resource=record["max_epochs"], **spec.pruner_args)
    return optuna.pruners.NopPruner()


def distributions(optuna, spec: SearchSpec) -> Dict[str, Any]:
    d = optuna.distributions
    made = {"log_uniform": lambda p: d.FloatDistribution(p.low, p.high, log=True),
            "uniform": lambda p: d.FloatDistribution(p.low, p.high),
            "int": lambda p: d.IntDistribution(p.low, p.high),
            "choice": lambda p: d.CategoricalDistribution(p.choices)}
    return {p.key: made[p.kind](p) for p in spec.space}


def median_at(optuna, study, step: int) -> Tuple[float, int]:
    """The median of the completed trials' values at `step` (what the median pruner compares with) and how many."""
    import statistics

    values = [t.intermediate_values[step] for t in study.get_trials(deepcopy=False,
                                                                      states=(optuna.trial.TrialState.COMPLETE,))
              if step in t.intermediate_values]
    return (statistics.median(values) if values else float("nan")), len(values)
