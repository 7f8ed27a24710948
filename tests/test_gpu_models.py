"""GPU models as data (containers/flavors.yaml): every name a site gives a GPU resolves to one model, in any case; an
unknown name is refused before anything is queued; the image-vs-GPU check works through the aliases."""
import collections

import pytest

from conftest import run_cluster
from train.errors import UserError
from train.host.clusters import flavor_table, gpu_model


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


def cluster(tmp_path, gpu_type: str) -> str:
    path = tmp_path / "site.yaml"
    path.write_text("name: site\nscheduler: slurm\npartitions:\n"
                    f"  gpu: {{image: cuda12.8, gpu_type: {gpu_type}, gpus_per_node: 4, cpus_per_node: 32, "
                    "mem_per_node_gb: 256, nodes: 4}\n"
                    "profiles:\n  p: {partition: gpu, gpus_per_node: 1, cpus_per_task: 4, mem_gb: 32, time: '01:00:00'}\n")
    return str(path)


def test_a_sites_own_gpu_name_passes_the_image_check(store, tmp_path):
    done = run_cluster(cluster(tmp_path, "A100-SXM4-40GB"), "p", "--dry-run")
    assert done.returncode == 0, done.stderr


def test_an_alias_of_a_hopper_gpu_still_refuses_the_cuda_11_6_image(store, tmp_path):
    done = run_cluster(cluster(tmp_path, "nvidia_h100_80gb_hbm3"), "p", "--flavor", "cuda11.6", "--dry-run")
    assert done.returncode == 2 and "image flavor 'cuda11.6' cannot drive H100 GPUs" in done.stderr, done.stderr
