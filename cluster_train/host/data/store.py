"""The data store: packed data sets (SquashFS) kept by sha256 under <image store>/data/store/<sha256>.sqsh, and
<image store>/data/index.json naming them. It lives inside the image store so that whatever store a command uses
(this checkout's images/, a lab's shared directory, a cluster's over SSH) holds the data its runs read too.

A name is a handle for one digest: packing another directory under a name already taken is refused, so a name in an
experiment file cannot silently start meaning other bytes; a run records the digest, not the name."""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.images.store import _index_lock, atomic_write, sha256_file

DATA = "data"  # under the image store
STORE = "store"
INDEX = "index.json"
SUFFIX = ".sqsh"
SQUASHFS_MAGIC = b"hsqs"  # a SquashFS superblock's first four bytes (little-endian, as mksquashfs writes)
SUPERBLOCK = 96  # bytes
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
DIGEST = re.compile(r"(sha256:)?([0-9a-f]{64})")


@dataclass
class DataRecord:
    name: str
    sha256: str
    path: str  # absolute path of the store copy
    size: int
    files: int  # regular files packed
    source: str  # the directory packed, the file imported or the registry reference pulled
    packed_at: str


def data_root(image_store: Path) -> Path:
    return Path(image_store) / DATA


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise UserError(f"data name {name!r} is not usable; use letters, digits, '.', '_' and '-' (at most 100), "
                        f"starting with a letter or digit")
    return name


def is_squashfs(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == SQUASHFS_MAGIC


def truncation(path: Path) -> Optional[str]:
    """Why a SquashFS file is shorter than its superblock says, or None: one read of 96 bytes, cheap enough for every
    submission (damage() below also lists the tables, which takes seconds on a large image)."""
    with open(path, "rb") as f:
        superblock = f.read(SUPERBLOCK)
    if len(superblock) < SUPERBLOCK:
        return f"truncated: {len(superblock)} bytes, less than a SquashFS superblock"
    used = int.from_bytes(superblock[40:48], "little")  # bytes_used: the filesystem's size, before padding
    size = Path(path).stat().st_size
    return f"truncated: {size} of its {used} bytes" if size < used else None


def damage(path: Path) -> Optional[str]:
    """Why a SquashFS file is not whole (its digest alone cannot say: a truncated copy has a digest too), or None:
    shorter than the size its superblock records, or tables unsquashfs cannot read."""
    cut = truncation(path)
    if cut:
        return cut
    if shutil.which("unsquashfs") is None:
        raise UserError("unsquashfs is not installed; install squashfs-tools (apt-get install squashfs-tools)")
    listed = subprocess.run(["unsquashfs", "-lls", str(path)], capture_output=True, text=True)
    said = [line for line in listed.stderr.splitlines() if line.strip()]
    return f"unsquashfs cannot read it ({said[-1] if said else listed.returncode})" if listed.returncode else None


def records(root: Path) -> List[DataRecord]:
    index = Path(root) / INDEX
    if not index.is_file():
        return []
    try:
        items = json.loads(index.read_text())
        entries = [DataRecord(**item) for item in items]
    except (ValueError, TypeError):
        raise UserError(f"the data index {index} is damaged; restore it, or move it aside and pack again") from None
    for entry in entries:  # store paths are kept relative, so the store can move
        entry.path = str((Path(root) / entry.path).resolve())
    return entries


def find(ref: str, root: Path) -> Optional[DataRecord]:
    """The record a name or a digest (sha256:HEX or HEX) stands for, if its store file still exists."""
    digest = DIGEST.fullmatch(ref)
    for entry in reversed(records(root)):
        if (entry.sha256 == digest.group(2) if digest else entry.name == ref) and Path(entry.path).is_file():
            return entry
    return None


def verified(ref: str, root: Path) -> DataRecord:
    """The stored data image a name or digest stands for, its bytes checked: refused when missing or modified."""
    entry = find(ref, root)
    if entry is None:
        known = ", ".join(sorted({e.name for e in records(root)})) or "none yet"
        raise UserError(f"no data image {ref!r} in the data store {root} (known: {known}); pack one with "
                        f"bin/run-cluster data pack DIR --name NAME, or see bin/run-cluster data list")
    why = fault(entry)
    if why:
        raise UserError(f"the data image {entry.path} ({entry.name}) {why}; restore it, or pack the data again")
    return entry


def fault(entry: DataRecord) -> Optional[str]:
    """What is wrong with a stored data image's file (said after its path), or None where it holds its bytes whole."""
    path = Path(entry.path)
    if not path.is_file():
        return "is gone from the store"
    if not is_squashfs(path):
        return "is not SquashFS any more: it was modified"
    why = damage(path)
    if why:
        return f"is damaged ({why})"
    if sha256_file(path) != entry.sha256:
        return f"was modified: its sha256 is no longer {entry.sha256}"
    return None


def add(name: str, packed: Path, digest: str, root: Path, source: str, files: int) -> Tuple[DataRecord, bool]:
    """A packed file (made by this process in the store's directory) enters the store under its digest: (its
    record, whether it was new). A name already naming other bytes is refused, and nothing is kept."""
    store = root / STORE
    store.mkdir(parents=True, exist_ok=True)
    with _index_lock(root):
        entries = records(root)
        taken = [e for e in entries if e.name == name]
        if taken and taken[-1].sha256 != digest:
            raise UserError(f"data name {name!r} already names sha256:{taken[-1].sha256[:12]} (packed from "
                            f"{taken[-1].source}); choose another --name, data names never change their bytes")
        same = [e for e in entries if e.sha256 == digest and e.name == name]
        if same:
            return same[-1], False
        stored = store / f"{digest}{SUFFIX}"
        if not stored.exists():
            os.replace(packed, stored)
        entry = DataRecord(name=name, sha256=digest, path=str(stored.resolve()), size=stored.stat().st_size,
                           files=files, source=source, packed_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        write(root, entries + [entry])
        return entry, True


def admit(file: Path, name: str, root: Path, expect: Optional[str] = None) -> Tuple[DataRecord, bool]:
    """A SquashFS file made elsewhere (packed on a laptop, copied by scp or Globus) enters the store: copied beside
    it first, so no later write to the user's file reaches the store; refused if its digest is not `expect`."""
    check_name(name)
    if not file.is_file() or not is_squashfs(file):
        raise UserError(f"{str(file)!r} is not a SquashFS file; pack the directory with bin/run-cluster data pack DIR")
    why = damage(file)
    if why:
        raise UserError(f"{str(file)!r} is a damaged SquashFS image ({why}); copy it again whole from where it was "
                        f"packed, or pack the directory again (nothing was stored)")
    where = Path(root) / STORE
    where.mkdir(parents=True, exist_ok=True)
    tmp = where / f".{name}.{os.getpid()}.tmp"
    try:
        shutil.copyfile(file, tmp)
        digest = sha256_file(tmp)
        if expect and digest != expect.removeprefix("sha256:"):
            raise UserError(f"{str(file)!r} has sha256 {digest}, not the expected {expect}; copy it again (nothing "
                            f"was stored)")
        return add(name, tmp, digest, Path(root), str(file.resolve()), files=squashfs_files(tmp))
    finally:
        tmp.unlink(missing_ok=True)


def squashfs_files(path: Path) -> int:
    """Regular files in a SquashFS image (unsquashfs lists them without unpacking)."""
    listed = subprocess.run(["unsquashfs", "-lls", str(path)], capture_output=True, text=True).stdout
    return sum(1 for line in listed.splitlines() if line.startswith("-"))


def write(root: Path, entries: List[DataRecord]) -> None:
    items = []
    for entry in entries:
        item = dataclasses.asdict(entry)
        item["path"] = os.path.relpath(entry.path, Path(root).resolve())
        items.append(item)
    atomic_write(Path(root) / INDEX, json.dumps(items, indent=2) + "\n")
