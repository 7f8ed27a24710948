"""GPU models as data (containers/flavors.yaml): every name a site gives a GPU resolves to one model, in any case; an
unknown name is refused (the dry-runs through a site's own names: tests/host/test_preflight.py)."""
import collections

import pytest

from cluster_train.shared.errors import UserError
from cluster_train.host.clusters.flavors import flavor_table, gpu_model


def all_names():
    for model, spec in flavor_table()["gpus"].items():
        yield model, model
        for alias in spec.get("aliases", ()):
            yield model, alias


@pytest.mark.parametrize("model, name", list(all_names()))
def test_every_model_and_alias_resolves_in_any_case(model, name):
    capability = flavor_table()["gpus"][model]["capability"]
    assert gpu_model(name) == gpu_model(name.upper()) == gpu_model(name.lower()) == (model, capability)


def test_no_name_belongs_to_two_models():
    owners = collections.defaultdict(set)
    for model, name in all_names():
        owners[name.lower()].add(model)
    assert {name: models for name, models in owners.items() if len(models) > 1} == {}


def test_an_unknown_gpu_name_is_refused_with_the_known_models():
    with pytest.raises(UserError) as refused:
        gpu_model("A100X")
    assert "'A100X'" in str(refused.value) and "H100" in str(refused.value) and "aliases" in str(refused.value)
