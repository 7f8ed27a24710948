"""containers/flavors.yaml read: the image flavors, the oldest NVIDIA driver each flavor's CUDA runs on, and the GPU
models (with the names sites give them) and their compute capability. A cluster file's partitions are checked
against it, and so is a job before it is submitted (cluster_train/host/jobs/preflight.py)."""
import functools
from typing import Any, Dict, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.shared.registry import unknown_name
from cluster_train.shared.yaml_file import load_yaml


def image_flavors() -> Tuple[str, ...]:
    """The image flavors, from containers/flavors.yaml: the one list of them."""
    return tuple(flavor_table()["flavors"])


def known_flavor(flavor: str) -> str:
    """The flavor, where containers/flavors.yaml has it (a derived image, cpu+myproject, by its base: the `+` of
    cluster_train/host/images/store.py); else refused as unknown, naming those it has and the closest."""
    base = flavor.partition("+")[0]
    if base not in image_flavors():
        raise UserError(f"{unknown_name('image flavor', base, list(image_flavors()))} (containers/flavors.yaml)")
    return flavor


def make_image(flavor: str) -> str:
    """The command that builds a flavor's image: every such advice is made here, so none names a flavor that
    containers/ cannot build."""
    return f"make image FLAVOR={known_flavor(flavor)}"


@functools.lru_cache(maxsize=1)
def flavor_table() -> Dict[str, Any]:
    return load_yaml(project.ROOT / "containers" / "flavors.yaml", "flavor table")


def min_driver(flavor: str) -> str:
    """The oldest NVIDIA driver that runs a flavor's CUDA; "" for the CPU image."""
    return str(flavor_table()["flavors"].get(flavor, {}).get("min_driver", ""))


def driver_version(text: str) -> Tuple[int, ...]:
    """A driver version as numbers, for comparing: "535.104.05" -> (535, 104, 5)."""
    return tuple(int(part) for part in text.split("."))


def gpu_model(gpu_type: str) -> Tuple[str, Any]:
    """(model, compute capability) of a site's GPU name: a model of containers/flavors.yaml or one of its aliases,
    in any case; refused with the known models where it is neither."""
    wanted = gpu_type.lower()
    for model, spec in flavor_table()["gpus"].items():
        if wanted == model.lower() or wanted in (alias.lower() for alias in spec.get("aliases", ())):
            return model, spec["capability"]
    raise UserError(f"gpu_type {gpu_type!r} is not a GPU model or alias of containers/flavors.yaml; use one of: "
                    f"{', '.join(flavor_table()['gpus'])} (a name only the site's scheduler uses goes in "
                    f"scheduler_gpu_name; or add the site's name to the model's aliases there)")
