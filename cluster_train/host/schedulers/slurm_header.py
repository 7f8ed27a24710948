"""Slurm's spelling of a job script header's options (#SBATCH lines) from the typed job's values; the Slurm adapter
(slurm.py) puts them in order in its directives()."""
from typing import List, Optional

from cluster_train.host.scheduling.job import Placement


def present(**values: Optional[str]) -> List[str]:
    """--name=value for each value given ("" and None: the option is left out, the site's default holds)."""
    return [f"--{name}={value}" for name, value in values.items() if value]


def gpu_options(place: "Placement") -> List[str]:
    """The partition's way to ask for GPUs (gpu_request): by count or by type, as --gpus-per-node or --gres."""
    if not place.gpus_per_node:
        return []
    typed = place.gpu_request.startswith("typed")
    gpus = f"{place.gpu_type}:{place.gpus_per_node}" if typed else str(place.gpus_per_node)
    return [f"--gres=gpu:{gpus}" if place.gpu_request.endswith("gres") else f"--gpus-per-node={gpus}"]


def memory_options(place: "Placement") -> List[str]:
    """Memory as the profile gives it: all of each node's (--mem=0), per GPU, per CPU, or per node; none: the
    partition's default."""
    if place.whole_node:
        return ["--mem=0"]
    for option, gb in (("mem-per-gpu", place.mem_per_gpu_gb), ("mem-per-cpu", place.mem_per_cpu_gb)):
        if gb:
            return [f"--{option}={gb}G"]
    return [] if place.mem_gb is None else [f"--mem={place.mem_gb}G"]
