"""`run-cluster init-cluster NAME`: a cluster file drafted from the live scheduler of the login node it runs on,
clusters/NAME.yaml (or --out): every partition with its nodes, cores, threads per core, memory, GPUs and time limit as
the scheduler states them, the features every node has, the image flavor its GPU model needs (containers/
flavors.yaml), and two first profiles per GPU partition (one GPU; one whole node). The accounts and QOS you may use
are listed as comments. What the scheduler cannot say is marked FILL_IN (a GPU name flavors.yaml does not know: its
model and image) or left as a commented line to decide (modules, fabric, driver, local disk); `check-cluster NAME`
refuses the draft until every FILL_IN is filled. On LSF the queues are the partitions (bqueues -l, lshosts: see
schedulers/lsf_inventory.py)."""
import json
import re
import socket
import time
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.clusters.flavors import flavor_table, gpu_model
from cluster_train.host.schedulers import adapter
from cluster_train.host.schedulers.inventory import Inventory, LivePartition
from cluster_train.host.schedulers.slurm_inventory import cores_per_gpu
from cluster_train.host.usage import Parser

FILL = "FILL_IN"
SCHEDULERS = ("slurm", "lsf")  # those whose live inventory can be read, in the order asked
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,59}")


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster init-cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="the cluster's name: the file is clusters/NAME.yaml, commands name it NAME")
    p.add_argument("--out", type=Path, help="write the draft here instead of clusters/NAME.yaml")
    p.add_argument("--force", action="store_true", help="replace a file already there")
    p.add_argument("--scheduler", choices=SCHEDULERS, help="ask this one (default: the first that answers here)")
    args = p.parse_args(argv)
    if not NAME.fullmatch(args.name):
        raise UserError(f"cluster name {args.name!r} is not usable; use lower-case letters, digits, '_' and '-'")
    out = args.out or project.CLUSTERS / f"{args.name}.yaml"
    if out.exists() and not args.force:
        raise UserError(f"{out} already exists; choose another name or --out, or pass --force to replace it")
    # before the scheduler is asked: a draft that cannot be written is found out now, not after the inventory
    project.check_writable(out.parent, f"the draft {out}: its directory", "write it elsewhere: --out DIR/NAME.yaml "
                                                                           "in a directory you can write")
    found = live_inventory(args.scheduler)
    text = draft(args.name, found)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    marks = text.count(f": {FILL}")
    todo = f"fill the {marks} value(s) marked {FILL}, then " if marks else ""
    print(f"drafted {out}: {len(found.partitions)} partition(s), {text.count('_1gpu:')} GPU partition(s) with "
          f"first profiles; {todo}check it: bin/run-cluster check-cluster {out}")
    return 0


def draft(name: str, found: Inventory) -> str:
    parts = [entry(part) for part in found.partitions]
    cuda = any(image != "cpu" for _, image, _ in parts)
    title = adapter(found.scheduler).title
    lines = [f"# Drafted by bin/run-cluster init-cluster from {socket.gethostname()}'s {title} on "
             f"{time.strftime('%Y-%m-%d')}: check every value against the site's documentation.",
             *associations(found),
             f"name: {name}", f"description: {json.dumps(f'{name} (drafted from its {title})')}",
             f"scheduler: {found.scheduler}",
             *([f"scheduler_cluster: {found.cluster}  # its name to its {title}: only a {title} serving it is asked"]
               if found.cluster else []),
             f"apptainer: {{nv: {'true' if cuda else 'false'}}}  # bind the NVIDIA driver into the container",
             "# modules: [apptainer]     # where apptainer (or its dependencies) must be loaded first",
             "# images: /group/path/images   # a group's shared image store", "partitions:"]
    for (text, _, note), part in zip(parts, found.partitions):
        lines += [f"  # {note}"] if note else []
        lines.append(f"  {part.name}: {text}")
    lines.append("profiles:")
    for part in found.partitions:
        lines += profiles(part, found.scheduler)
    return "\n".join(lines) + "\n"


def live_inventory(wanted: Optional[str]) -> Inventory:
    """What the scheduler answering on this login node has (the wanted one's, else Slurm's, else LSF's)."""
    for name in [wanted] if wanted else SCHEDULERS:
        found = adapter(name).inventory()
        if found is not None and found.partitions:
            return found
    asked = {"slurm": "Slurm's sinfo", "lsf": "LSF's bqueues"}
    names = [asked[wanted]] if wanted else list(asked.values())
    raise UserError(f"no scheduler answers here ({' nor '.join(names)}): "
                    f"run init-cluster on the cluster's login node, or write the file by hand "
                    f"(docs/how-to/add-cluster.md)")


def associations(found: Inventory) -> List[str]:
    if found.charged_to:  # a scheduler without Slurm-like associations says how it charges a job
        return [f"# {found.charged_to}"]
    if not found.accounts:
        return ["# sacctmgr lists no association for you: the site may not enforce accounts"]
    return [f"# Your accounts: {', '.join(found.accounts)} (your settings' account: picks one; the first is usually "
            f"the default). Your QOS: {', '.join(found.qos) or 'none listed'} (a profile's qos:)."]


def entry(part: LivePartition) -> Tuple[str, str, str]:
    """(the partition's flow mapping, its image flavor, a note for the user)."""
    if not part.nodes:  # LSF: a queue of host groups (bmgroup lists their hosts)
        return (f"{{image: {FILL}, gpu_type: {FILL}, gpus_per_node: {FILL}, cpus_per_node: {FILL}, "
                f"mem_per_node_gb: {FILL}, nodes: {FILL}}}", FILL,
                f"{FILL}: its hosts are host groups; `bmgroup GROUP` and `lshosts -w HOST` say what they have")
    gpu_type, image, note = gpu_of(part)
    fields = [f"image: {image}", f"gpu_type: {gpu_type}", f"gpus_per_node: {part.gpus_per_node}"]
    if part.gpu_name and part.gpu_name.lower() != gpu_type.lower():  # the site's own word: ask for it by that name
        fields += [f"scheduler_gpu_name: {part.gpu_name}", "gpu_request: typed"]
    fields += [f"cpus_per_node: {part.cores_per_node}", f"mem_per_node_gb: {part.mem_per_node_gb}",
               f"nodes: {part.nodes}"]
    fields += [f"threads_per_core: {part.threads_per_core}"] if part.threads_per_core > 1 else []
    fields += [f"max_time: {json.dumps(part.max_time)}"] if part.max_time else []
    some = (f"nodes with features {', '.join(part.some_features)} only: add constraint: NAME"
            if part.some_features else "")
    default = "the scheduler's default partition" if part.default else ""
    return "{" + ", ".join(fields) + "}", image, "; ".join(filter(None, [note, default, some]))


def gpu_of(part: LivePartition) -> Tuple[str, str, str]:
    """(gpu_type, image flavor, note): the GPU model flavors.yaml knows by the scheduler's name, the newest flavor
    whose CUDA drives it; FILL_IN both where the name is unknown."""
    if not part.gpus_per_node:
        return "none", "cpu", ""
    if not part.gpu_name:
        return FILL, FILL, f"{FILL}: the GPU model (sinfo names no single type) and the image flavor it needs"
    try:
        model, capability = gpu_model(part.gpu_name)
    except UserError:
        return FILL, FILL, (f"{FILL}: Slurm calls the GPU {part.gpu_name!r}: its model in containers/flavors.yaml "
                            f"(add {part.gpu_name!r} to that model's aliases) and the image flavor it needs")
    return model, flavor_for(capability), ""


def flavor_for(capability) -> str:
    """The newest image flavor whose CUDA drives a GPU of this compute capability; cpu for GPUs without CUDA."""
    if not isinstance(capability, (int, float)):
        return "cpu"
    fits = [name for name, spec in flavor_table()["flavors"].items()
            if spec.get("min_capability", 99) <= capability <= spec.get("max_capability", -1)]
    return fits[-1] if fits else FILL


def profiles(part: LivePartition, scheduler: str) -> List[str]:
    """One GPU, and one whole node (one rank per GPU), on a GPU partition; none on a CPU one."""
    if not part.gpus_per_node:
        return []
    key = re.sub(r"[^A-Za-z0-9_]", "_", part.name)
    cpus, mem = cores_per_gpu(part), max(1, part.mem_per_node_gb // part.gpus_per_node)
    time_limit = json.dumps(first_time(part.max_time, scheduler))
    return [f"  {key}_1gpu: {{description: one GPU of {part.name}, partition: {part.name}, nodes: 1, gpus_per_node: 1, "
            f"cpus_per_task: {cpus}, mem_gb: {mem}, time: {time_limit}}}",
            f"  {key}_node: {{description: a whole {part.name} node (one rank per GPU), partition: {part.name}, "
            f"nodes: 1, gpus_per_node: {part.gpus_per_node}, cpus_per_task: {cpus}, "
            f"mem_gb: {mem * part.gpus_per_node}, time: {time_limit}}}"]


def first_time(max_time: str, scheduler: str) -> str:
    """A first profile's time limit: the scheduler's default (one hour: short jobs start soonest), or the
    partition's limit where that is shorter."""
    site = adapter(scheduler)
    limit: Optional[int] = site.time_seconds(max_time) if max_time else 0
    return max_time if limit and limit < site.time_seconds(site.default_time) else site.default_time
