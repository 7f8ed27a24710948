"""What a live Slurm cluster says it has, for `init-cluster` (a cluster file drafted from it) and `check-cluster`
(where a file no longer agrees with it): each partition from `sinfo` (one line per partition and node
configuration, merged here), the accounts and QOS the user may use from `sacctmgr`'s associations, and its name
(ClusterName), which tells whose cluster file this machine's Slurm may be asked about."""
import functools
import getpass
import math
import re
import shutil
import subprocess
from typing import Dict, List, Optional, Tuple

from cluster_train.host.schedulers.inventory import Inventory, LivePartition

# sinfo's fields: partition, nodes, CPUs per node, memory per node (MB), GRES, time limit, features, S:C:T, default
SINFO = ["sinfo", "--noheader", "--format=%R|%D|%c|%m|%G|%l|%f|%z|%P"]
SINFO_FIELDS = 9
MB_PER_GB = 1024  # Slurm's MB are MiB: RealMemory=16000 is 15 GiB and a bit


def inventory() -> Optional[Inventory]:
    """The partitions and the user's associations; None where sinfo is not here or no controller answers."""
    if shutil.which("sinfo") is None:
        return None
    done = subprocess.run(SINFO, capture_output=True, text=True)
    if done.returncode != 0:
        return None
    return Inventory(partitions=partitions(done.stdout), **associations(), cluster=config("ClusterName") or "")


def config(key: str) -> Optional[str]:
    """One value of `scontrol show config` (ClusterName: the cluster this machine's Slurm serves; MaxArraySize); None
    where scontrol is not here or no controller answers."""
    scontrol = shutil.which("scontrol")
    found = re.search(rf"^{key}\s*=\s*(\S+)", shown_config(scontrol), re.M) if scontrol else None
    return found.group(1) if found else None


@functools.lru_cache(maxsize=None)
def shown_config(scontrol: str) -> str:
    """What that scontrol's `show config` printed, "" where it failed or timed out: asked once per process (doctor,
    a dry run and a sweep each read several keys, and a slow controller makes each wait up to 10 s)."""
    try:
        done = subprocess.run([scontrol, "show", "config"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def partitions(sinfo: str) -> List[LivePartition]:
    """One per partition, in sinfo's order: node counts added over its node configurations, each per-node figure the
    smallest of them (a profile must fit every node Slurm may give it), the features every node has."""
    merged: Dict[str, List[List[str]]] = {}
    for line in sinfo.splitlines():
        fields = line.split("|")
        if len(fields) == SINFO_FIELDS:
            merged.setdefault(fields[0], []).append(fields)
    return [partition(name, rows) for name, rows in merged.items()]


def partition(name: str, rows: List[List[str]]) -> LivePartition:
    gpus = [gpu_count(row[4]) for row in rows]
    threads = [int(row[7].split(":")[2]) if row[7].count(":") == 2 else 1 for row in rows]
    features = [set(filter(None, row[6].split(","))) - {"(null)"} for row in rows]
    return LivePartition(
        name=name, nodes=sum(int(row[1]) for row in rows),
        cores_per_node=min(int(row[2].rstrip("+")) // t for row, t in zip(rows, threads)),
        threads_per_core=min(threads), mem_per_node_gb=min(int(row[3].rstrip("+")) for row in rows) // MB_PER_GB,
        gpus_per_node=min(count for count, _ in gpus), gpu_name=gpus[0][1] if len({g[1] for g in gpus}) == 1 else "",
        max_time=time_limit(rows[0][5]), features=tuple(sorted(set.intersection(*features))),
        some_features=tuple(sorted(set.union(*features) - set.intersection(*features))),
        default=rows[0][8].endswith("*"),
    )


def gpu_count(gres: str) -> Tuple[int, str]:
    """(GPUs per node, their type) from sinfo's GRES: gpu:a100:4(S:0-1),shard:8 -> (4, "a100"); (0, "") without."""
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            return int(parts[-1]), parts[1] if len(parts) == 3 else ""
    return 0, ""


def time_limit(text: str) -> str:
    """sinfo's time limit as a cluster file's max_time: "" for none (infinite)."""
    return "" if text in ("infinite", "UNLIMITED", "n/a") else text


def associations() -> Dict[str, Tuple[str, ...]]:
    """The accounts and QOS this user's associations allow (empty where accounting is off or sacctmgr is not here)."""
    found = qos_by_account() or {}
    return {"accounts": tuple(found), "qos": tuple(sorted({qos for listed in found.values() for qos in listed}))}


def qos_by_account() -> Optional[Dict[str, Tuple[str, ...]]]:
    """Each account this user's associations let it charge -> the QOS it may use there (sacctmgr lists one line per
    association, e.g. per partition: merged); None where sacctmgr is not here or no accounting answers."""
    if shutil.which("sacctmgr") is None:
        return None
    try:
        done = subprocess.run(["sacctmgr", "--noheader", "--parsable2", "show", "assoc", f"user={getpass.getuser()}",
                               "format=account,qos"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    found: Dict[str, set] = {}
    for line in done.stdout.splitlines():
        account, _, qos = line.partition("|")
        if account:
            found.setdefault(account, set()).update(filter(None, qos.split(",")))
    return {account: tuple(sorted(qos)) for account, qos in found.items()}


def gpu_hour_limits() -> Dict[str, float]:
    """Each of this user's accounts with a GPU limit: GrpTRESMins gres/gpu, in hours; {} where none is stated."""
    try:
        done = subprocess.run(["sacctmgr", "--noheader", "--parsable2", "show", "assoc", f"user={getpass.getuser()}",
                               "format=account,grptresmins"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = [(line.split("|")[0], re.search(r"gres/gpu=(\d+)", line)) for line in done.stdout.splitlines()]
    return {account: int(limit[1]) / 60 for account, limit in found if limit and done.returncode == 0}


def cores_per_gpu(part: LivePartition) -> int:
    """CPUs a one-GPU task may take: its share of the node's (Slurm's CPUs are hardware threads)."""
    return max(1, math.floor(part.cores_per_node * part.threads_per_core / max(part.gpus_per_node, 1)))
