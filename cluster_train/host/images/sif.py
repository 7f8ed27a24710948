"""A SIF file from outside the store (`images import`, `pull`): its header, its labels, and its admission.

A copy made by scp, rsync or Globus may be truncated: `check_complete_sif` reads the SIF header and checks that every
byte it promises is there. `sif_labels` reads cluster-train's labels (its flavor, commit, a derived image's parent)
with `apptainer inspect`. `admit` puts a file into the store (cluster_train/host/images/store.py) only after both checks
and the digest the sender gave, refusing with one line and leaving the store untouched.
"""
import json
import struct
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import apptainer
from cluster_train.host.images import store

SIF_MAGIC = b"SIF_MAGIC"  # bytes 32-40 of every SIF, after its launcher line
FLAVOR_LABEL = "org.cluster-train.flavor"
COMMIT_LABEL = "org.cluster-train.git-commit"
PARENT_LABEL = "org.cluster-train.parent-sha256"  # a derived image's (containers/derived.def.j2)


def admit(sif: Path, expect: Optional[str], root: Path, pushed: Optional[List[dict]] = None,
          owned: bool = False, shown: str = "") -> Tuple[store.ImageRecord, bool]:
    """A SIF into the store after every check (import, pull); refused with one line, the store untouched.
    `shown`: how the messages name the file (a pulled one by its reference, not its temporary path)."""
    shown = shown or str(sif)
    check_complete_sif(sif, shown)
    labels = sif_labels(sif, shown)
    if FLAVOR_LABEL not in labels:
        raise UserError(f"{shown} is a SIF but not one of cluster-train's images (no {FLAVOR_LABEL} label); build "
                        f"it with make image")
    digest = store.sha256_file(sif)
    if expect and digest != expect.removeprefix("sha256:"):
        raise UserError(f"{shown} has sha256 {digest}, not the expected {expect}; it is damaged or another image")
    return store.add(labels[FLAVOR_LABEL], sif, digest, root, labels.get(COMMIT_LABEL), pushed, owned,
                     parent_sha256=labels.get(PARENT_LABEL, ""))


def check_complete_sif(sif: Path, shown: str) -> None:
    """A SIF header, and every byte of the data its header says follows (scp and rsync leave truncated copies)."""
    if not sif.is_file():
        raise UserError(f"{shown} does not exist or is not a file; give the path of a .sif image")
    with sif.open("rb") as f:
        header = f.read(128)
    if len(header) < 128 or header[32:41] != SIF_MAGIC:
        raise UserError(f"{shown} is not a SIF image (no SIF header); give an image built by make image")
    data_offset, data_length = struct.unpack("<2q", header[112:128])
    size = sif.stat().st_size
    if size < data_offset + data_length:
        raise UserError(f"{shown} is truncated: {size} bytes of the {data_offset + data_length} its header "
                        f"describes; copy it again")


def sif_labels(sif: Path, shown: str) -> dict:
    done = apptainer.inspect_labels(sif)
    try:
        return json.loads(done.stdout)["data"]["attributes"]["labels"] or {}
    except (ValueError, KeyError, TypeError):
        raise UserError(f"apptainer cannot read the labels of {shown}: "
                        f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}") from None
