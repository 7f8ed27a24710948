"""What a live LSF cluster says it has, for `init-cluster` and `check-cluster`'s drift: each queue from `bqueues -l`
(its RUNLIMIT and HOSTS; the long listing, which every LSF 10.1 prints, where `-o`/`-json` need a later fix pack),
each host's CPUs and memory from `lshosts -w` and its GPUs from `lshosts -gpu` (one line per GPU). A queue's per-host
figures are the smallest of its hosts' (a profile must fit every host LSF may give it). LSF has no Slurm-like
accounts or QOS: a job is charged to a project (bsub -P), which the user's settings name."""
import re
import shutil
import subprocess
from typing import Dict, List, Optional

from cluster_train.host.schedulers.inventory import Inventory, LivePartition

CHARGED_TO = "LSF charges a job to a project (bsub -P): your settings' account: names it where the site asks"
MEMORY_UNITS = {"K": 1 / 1024 ** 2, "M": 1 / 1024, "G": 1, "T": 1024}  # lshosts' maxmem suffix -> GiB


def inventory() -> Optional[Inventory]:
    """The queues; None where bqueues is not here or no mbatchd answers."""
    if shutil.which("bqueues") is None:
        return None
    queues = said(["bqueues", "-l"])
    if queues is None:
        return None
    hosts, gpus = host_table(said(["lshosts", "-w"]) or ""), gpu_table(said(["lshosts", "-gpu"]) or "")
    return Inventory(partitions=[queue(block, hosts, gpus) for block in re.split(r"^QUEUE: ", queues, flags=re.M)[1:]],
                     accounts=(), qos=(), scheduler="lsf", charged_to=CHARGED_TO)


def said(argv: List[str]) -> Optional[str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def queue(block: str, hosts: Dict[str, Dict[str, float]], gpus: Dict[str, List[str]]) -> LivePartition:
    """One `bqueues -l` block: HOSTS: names hosts, `all` (every server host), or host groups (NAME/, whose members
    bmgroup would list: counted as unknown, 0, which the draft marks for the user)."""
    name = block.split()[0]
    listed = re.search(r"^HOSTS:\s*(.*)$", block, re.M)
    names = (listed.group(1).split() if listed else ["all"])
    members = list(hosts) if names == ["all"] else [h for h in names if h in hosts]
    limit = re.search(r"RUNLIMIT\s*\n\s*([\d.]+) min", block)
    models = {model for host in members for model in gpus.get(host, [])}
    return LivePartition(
        name=name, nodes=len(members), cores_per_node=smallest(hosts[h]["ncpus"] for h in members),
        threads_per_core=1, mem_per_node_gb=smallest(hosts[h]["maxmem_gb"] for h in members),
        gpus_per_node=smallest(len(gpus.get(h, [])) for h in members),
        gpu_name=models.pop() if len(models) == 1 else "",  # one model, or mixed: the draft asks
        max_time=hours_minutes(float(limit.group(1))) if limit else "", features=(), some_features=(), default=False)


def smallest(values) -> int:
    return int(min(values, default=0))


def hours_minutes(minutes: float) -> str:
    """bqueues' RUNLIMIT minutes as bsub -W's [hour:]minute."""
    whole = int(minutes)
    return f"{whole // 60}:{whole % 60:02d}"


def host_table(table: str) -> Dict[str, Dict[str, float]]:
    """`lshosts -w`: host -> ncpus and maxmem (GiB), server hosts only; a host that reports `-` counts as 0."""
    rows = [line.split() for line in table.splitlines()[1:] if line.strip()]
    return {row[0]: {"ncpus": number(row[4]), "maxmem_gb": gib(row[5])} for row in rows
            if len(row) >= 8 and row[7] != "No"}


def gpu_table(table: str) -> Dict[str, List[str]]:
    """`lshosts -gpu`: host -> the model of each of its GPUs."""
    found: Dict[str, List[str]] = {}
    for row in (line.split() for line in table.splitlines()[1:] if line.strip()):
        if len(row) >= 3:
            found.setdefault(row[0], []).append(row[2])
    return found


def number(text: str) -> float:
    return float(text) if re.fullmatch(r"[\d.]+", text) else 0


def gib(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)([KMGT]?)", text)
    return float(found.group(1)) * MEMORY_UNITS[found.group(2) or "M"] if found else 0
