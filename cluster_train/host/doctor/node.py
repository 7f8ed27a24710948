"""`doctor CLUSTER --node PROFILE`: a short job on that profile's nodes, one process per rank as your own command
runs, that reports from inside the image what each rank sees (cluster_train/image/node_check.py): its host, its GPUs,
the driver against the image's minimum, the node's fabric devices, and one all-reduce across all ranks with its bus
bandwidth. The check runs from a snapshot of this checkout's cluster_train package (the way a command runs your code),
so an image built before it still runs it. Exit 0 when the job completed and every GPU rank sees its GPUs."""
import json
import tempfile
from pathlib import Path
from typing import List

import yaml

from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.jobs.build import Request, Site, build
from cluster_train.host.runs.queue import one_run
from cluster_train.host.runs.showing import show_and_queue

COMMAND = ["python", "-m", "cluster_train.image.node_check"]
RANK_MEM_GB = 1  # a rank holds the image's torch and one all-reduce buffer, not a model or data: host RAM checked so
TIMEOUT_S = 900.0  # the job waits in the queue first; the check itself takes seconds


def run(site: Site, profile: str, timeout_s: float = TIMEOUT_S) -> int:
    with tempfile.TemporaryDirectory(prefix="ct-doctor-") as tmp:
        experiment = Path(tmp) / "node_check.yaml"  # the command, and the code it runs: this checkout
        experiment.write_text(yaml.safe_dump({"name": "node_check", "command": COMMAND, "code": str(project.ROOT),
                                              "data": {"num_workers": 0, "rank_mem_gb": RANK_MEM_GB}}))
        sub = build(site, Request(profile, str(experiment), stale_image_ok=True))  # it runs the snapshot
        status = show_and_queue(one_run(sub), dry_run=False, wait=True, timeout_s=timeout_s)
    run_dir = sub.job.work.run_dir
    found = Path(run_dir) / "node_check.json"
    if status != 0 or not found.is_file():
        raise UserError(f"the node check on profile {profile!r} did not complete (its log is in {run_dir}/logs); fix "
                        f"what its log names, then run doctor {site.cluster.name} --node {profile} again")
    problems = short_of_gpus(json.loads(found.read_text())["ranks"], sub.job.placement.gpus_per_node,
                             sub.job.work.ranks_per_node, sub.job.image.nv)
    for line in problems:
        print(f"problem  {line}")
    print(f"doctor {site.cluster.name} --node {profile}: "
          + (f"{len(problems)} problem(s)" if problems else f"every rank ran, the table above ({found})"))
    return 1 if problems else 0


def short_of_gpus(ranks: List[dict], gpus_per_node: int, ranks_per_node: int, nv: bool) -> List[str]:
    """Ranks of a GPU job (with the driver bound: nv) that see fewer GPUs than their share of the node's."""
    share = gpus_per_node // max(ranks_per_node, 1)
    if not nv or not share:
        return []
    return [f"rank {r['rank']} on {r['host']} sees {r['gpus_visible']} GPU(s), not its {share}: check the profile's "
            f"gpus_per_node against the partition, and CUDA_VISIBLE_DEVICES in the job's environment"
            for r in ranks if r["gpus_visible"] < share]
