"""What a live scheduler says it has (its partitions, the accounts and QOS you may use, its cluster's name), as an
adapter's inventory() answers: init-cluster drafts a cluster file from it, check-cluster compares a file with it."""
from dataclasses import dataclass
from typing import List, Tuple


@dataclass(frozen=True)
class LivePartition:
    """One partition (LSF queue) as the live scheduler describes it: what a cluster file's entry would state."""

    name: str
    nodes: int
    cores_per_node: int
    threads_per_core: int
    mem_per_node_gb: int
    gpus_per_node: int
    gpu_name: str  # the scheduler's word for the GPU ("" none, or mixed types)
    max_time: str  # in the scheduler's format; "" unlimited
    features: Tuple[str, ...]  # every node has them
    some_features: Tuple[str, ...]  # some nodes have them (a constraint picks those)
    default: bool


@dataclass(frozen=True)
class Inventory:
    """What the live scheduler says: its partitions, and the accounts and QOS this user may use."""

    partitions: List[LivePartition]
    accounts: Tuple[str, ...]
    qos: Tuple[str, ...]
    scheduler: str = "slurm"  # the adapter that asked (init-cluster's draft names it and uses its time format)
    cluster: str = ""  # the scheduler's own name for its cluster (Slurm's ClusterName): the draft's scheduler_cluster
    charged_to: str = ""  # where it has no accounts to list: how it charges a job, for the draft's reader
