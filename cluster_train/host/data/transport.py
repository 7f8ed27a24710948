"""Data images through an OCI registry, as images travel
(cluster_train/host/images/oci.py, `apptainer push/pull oras://`).

Apptainer's ORAS push takes only SIF files, so the SquashFS travels as the one data partition of a SIF wrapper
(`apptainer sif new` + `sif add`); a pull takes the partition out again and admits it only if its sha256 is the one
expected. The wrapper is made anew for each push (it carries a random id), so the digest tag is the data image's own:
`:sha256-<data digest>`, whatever the wrapper's bytes."""
import re
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import apptainer
from cluster_train.host.data import store
from cluster_train.host.images import oci
from cluster_train.host.images.store import sha256_file
from cluster_train.host.progress import Report, ignore

# sif add's numbers: a partition (4) of SquashFS (1), used as data (3); the architecture SIF insists on (amd64, 2)
# says nothing of a data set, which any architecture reads
PARTITION = ["--datatype", "4", "--partfs", "1", "--parttype", "3", "--partarch", "2"]
DATA_PARTITION = re.compile(r"^(\d+)\s*\|.*\|\s*FS \(Squashfs/Data/", re.M)


def push(entry: store.DataRecord, reference: str, plain_http: bool, report: Report = ignore) -> List[str]:
    with tempfile.TemporaryDirectory(dir=Path(entry.path).parent) as tmp:
        wrapper = Path(tmp) / "data.sif"
        sif("new", str(wrapper))
        sif("add", *PARTITION, "--filename", f"{entry.name}.sqsh", str(wrapper), entry.path)
        return oci.push(wrapper, entry.sha256, reference, plain_http, report)


def pull(reference: str, plain_http: bool, name: str, expect: Optional[str], root: Path,
         report: Report = ignore) -> Tuple[store.DataRecord, bool]:
    """(the data image, whether it is new): the store's own copy where it has the expected digest already."""
    store.check_name(name)
    expect = expect.removeprefix("sha256:") if expect else None
    known = store.find(expect, root) if expect else None
    if known is not None:
        return known, False
    wrapper = oci.pull(reference, plain_http, root / store.STORE, report)
    packed = wrapper.with_suffix(".sqsh")
    try:
        listed = sif("list", str(wrapper))
        part = DATA_PARTITION.search(listed)
        if part is None:
            raise UserError(f"{reference} holds no data image (no SquashFS data partition); push one with "
                            f"bin/run-cluster data push NAME {reference}")
        with open(packed, "wb") as out:
            apptainer.sif("dump", part.group(1), str(wrapper), stdout=out, check=True)
        digest = sha256_file(packed)
        if expect and digest != expect:
            raise UserError(f"the data image pulled from {reference} has sha256 {digest}, not the expected {expect}; "
                            f"nothing was stored")
        if not store.is_squashfs(packed) or store.damage(packed):
            raise UserError(f"the data pulled from {reference} is not a whole SquashFS image; nothing was stored")
        return store.add(name, packed, digest, root, reference, store.squashfs_files(packed))
    finally:
        wrapper.unlink(missing_ok=True)
        packed.unlink(missing_ok=True)


def sif(command: str, *args: str) -> str:
    done = apptainer.sif(command, *args)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise UserError(f"apptainer sif {command} failed: {said.removeprefix('FATAL:').strip()}")
    return done.stdout
