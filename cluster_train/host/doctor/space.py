"""The doctor's checks of where jobs and images write: free space (and the user's quota, where `lfs quota` or
`quota` answers) at the run root, the image store and the data store against what will be written there, and the
current image of each flavor the cluster runs, its bytes checked against its digest."""
import getpass
import os
import shutil
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.project import existing
from cluster_train.host.clusters import Cluster
from cluster_train.host.clusters.flavors import make_image
from cluster_train.host.data import store as data_store
from cluster_train.host.doctor.check import OK, PROBLEM, WARNING, Check, run
from cluster_train.host.images import store
from cluster_train.host.jobs.build import Site

GB = 10**9
# What one run writes to its run root: last and best checkpoints, logs, metrics. A few GB for the models here; a
# billion-parameter model's checkpoints alone are larger, and its run root needs that much more.
RUN_ROOT_NEEDS = 5 * GB


def needed_flavors(cluster: Cluster) -> List[str]:
    """The image flavors of the partitions the cluster's profiles run on."""
    return sorted({cluster.partition(profile.partition).image for profile in cluster.profiles.values()})


def check_image(flavor: str, root: Path) -> Tuple[Check, Optional[store.ImageRecord]]:
    """The flavor's current image in the store, its bytes checked against its digest: (the check, its record)."""
    try:
        record = store.current(flavor, root)
        if record is None:
            prefix = "" if root.resolve() == (project.ROOT / "images").resolve() else f"CT_IMAGES={root} "
            return Check(PROBLEM, f"images: no {flavor} image in the store {root}",
                         f"{prefix}{make_image(flavor)} where you can build, or bring one built elsewhere: "
                         f"bin/run-cluster images import {flavor}.sif --expect-sha256 SHA256 (or images pull)"), None
        store.verified(record.sha256, root, f"the {flavor} image")
    except UserError as err:
        return Check(PROBLEM, f"images: {err}"), None
    return Check(OK, f"images: {flavor} sha256:{record.sha256[:12]} in {root}, its digest verified"), record


def check_space(site: Site, images: List[store.ImageRecord]) -> Iterator[Check]:
    try:
        runs = site.runs_root
    except UserError as err:
        yield Check(PROBLEM, f"run root: {err}")
    else:
        yield space("run root", runs, RUN_ROOT_NEEDS, f"{RUN_ROOT_NEEDS // GB} GB assumed: a run's checkpoints, logs "
                    "and metrics", PROBLEM, "free space there, or set runs: to a file system with room (runs: "
                    "${scratch}/cluster-train/runs in your settings; $CT_RUNS_DIR for one shell)",
                    site.runs_root_warnings())
    image = max(images, key=lambda record: record.size, default=None)
    yield space("image store", site.image_store, image.size if image else 0,
                f"the {image.flavor} image's size: a rebuild or import writes as much" if image else "no image yet",
                WARNING, "free space there, or set images: in your settings to a store with room")
    root = data_store.data_root(site.image_store)
    largest = max((entry.size for entry in data_store.records(root)), default=0)
    yield space("data store", root, largest, "the largest data image: packing or importing one writes about as much"
                if largest else "no data image yet", WARNING, "free space there (bin/run-cluster data list shows "
                                                              "what it holds)")


def space(what: str, path: Path, needs: int, why: str, short: str, fix: str, warned: Sequence[str] = ()) -> Check:
    """Free space (and quota, where one is set) where `path` lives against `needs`; `short`: the state when less."""
    here = existing(path)
    stats = os.statvfs(here)
    free = stats.f_bavail * stats.f_frsize
    left, tool = quota_left(here)
    said = f"{what} {path}: {size(free)} free" + (f", {size(left)} left in your quota ({tool})" if tool else "")
    if what == "run root" and not os.access(here, os.W_OK):
        return Check(PROBLEM, f"{said}, but {here} is not writable", fix)
    if min(free, left if left is not None else free) < needs:
        return Check(short, f"{said}, less than {size(needs)} ({why})", fix)
    if warned:  # the run root inside the checkout while you have a scratch directory
        return Check(WARNING, f"{said}; {warned[0].removeprefix('warning: ')}")
    return Check(OK, f"{said}, wants {size(needs)} ({why})" if needs else f"{said} ({why})")


def quota_left(path: Path) -> Tuple[Optional[int], str]:
    """Bytes left under the user's disk quota where `path` lives, and which tool said so: `lfs quota` (Lustre
    scratch), else `quota`; (None, "") where neither is here, neither answers for that file system, or no limit is
    set."""
    for command in (["lfs", "quota", "-u", getpass.getuser(), str(path)], ["quota", "-w", "-f", str(path)]):
        if shutil.which(command[0]):
            done = run(command)
            left = quota_table_left(done.stdout) if done.returncode == 0 else None
            if left is not None:
                return left, " ".join(command[:2]) if command[0] == "lfs" else "quota"
    return None, ""


def quota_table_left(table: str) -> Optional[int]:
    """Bytes left under the tighter of the soft and hard block limits in the first row of quota's or lfs quota's
    table (used, quota, limit in KiB after the file system's name; '*' marks a use over the soft limit); None where
    no limit is set."""
    lines = table.splitlines()
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["Filesystem"]), None)
    if header is None:
        return None
    words = " ".join(lines[header + 1:header + 3]).split()  # a long file system name wraps onto a line of its own
    try:
        used, soft, hard = (int(word.rstrip("*")) for word in words[1:4])
    except ValueError:
        return None
    limits = [limit for limit in (soft, hard) if limit > 0]
    return max(0, min(limits) - used) * 1024 if limits else None


def size(count: int) -> str:
    for unit, scale in (("GB", GB), ("MB", 10**6), ("kB", 10**3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
