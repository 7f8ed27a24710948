"""The image store: built SIFs kept by sha256 under images/store/, and images/index.json recording each build.

A rebuild never removes an older image: `record` hard-links the SIF into `images/store/<sha256>.sif`, so when
`make image` later replaces `images/cpu.sif` the store still holds the bytes an earlier run used, and a rerun
(`bin/run-cluster --rerun`) finds them by digest with `find`.

`images/index.json` is a list of records, oldest first; store paths in it are relative to the images directory,
so the directory can move. A derived image (`images derive`: a project's packages on top of a stored image) is
recorded under the flavor `<base flavor>+<name>` with `parent_sha256`, the image it was built on; records written
before that field existed read as having no parent. Stdlib only, Python 3.9+, no torch: this runs on login nodes, and
`make image` records each build through it (`python3 -m cluster_train.host.images.content_key record ...`, which also
computes the build's content key: cluster_train/host/images/content_key.py).
"""
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cluster_train.shared.errors import UserError

try:  # POSIX: serialise concurrent writers of the index
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

INDEX = "index.json"
STORE = "store"


@dataclass
class ImageRecord:
    flavor: str
    path: str  # absolute path of the store copy: <images>/store/<sha256>.sif
    sha256: str
    def_sha256: str
    lock_sha256: str
    inputs_sha256: str  # the content key of the build (see `inputs_text`); "" when unknown
    size: int
    built_at: str
    git_commit: Optional[str]
    pushed: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # [{reference, plain_http}]
    signed_from: str = ""  # a signed copy (images sign): the sha256 of the build it was signed from
    signers: List[str] = dataclasses.field(default_factory=list)  # the key fingerprints that signed it
    parent_sha256: str = ""  # a derived image (images derive): the sha256 of the image it was built on


DERIVED = "+"  # a derived image's flavor: <base flavor>+<name>, e.g. cpu+myproject


def base_flavor(flavor: str) -> str:
    """The flavor whose CUDA, GPUs and driver a (derived) image has: `cpu` of `cpu+myproject`."""
    return flavor.split(DERIVED, 1)[0]


def sha256_file(path) -> str:
    """sha256 of a file, read in 1 MiB blocks (SIFs are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# The store and the index


def record(
    flavor: str,
    sif,
    def_file,
    lock_file,
    root=Path("images"),
    inputs_sha256: str = "",
    git_commit: Optional[str] = None,
) -> ImageRecord:
    """Hash a built SIF, keep it in the store under its digest and append a record to the index."""
    root = Path(root)
    sif = Path(sif)
    digest = sha256_file(sif)
    store = root / STORE
    store.mkdir(parents=True, exist_ok=True)
    stored = store / f"{digest}.sif"
    if not stored.exists():
        _link_or_copy(sif, stored)
    entry = ImageRecord(
        flavor=flavor,
        path=str(stored.resolve()),
        sha256=digest,
        def_sha256=sha256_file(def_file),
        lock_sha256=sha256_file(lock_file),
        inputs_sha256=inputs_sha256,
        size=stored.stat().st_size,
        built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        git_commit=git_commit if git_commit is not None else _git_commit(),
    )
    with _index_lock(root):
        _write_index(root, _read_index(root) + [entry])
    return entry


def add(flavor: str, sif: Path, sha256: str, root: Path, git_commit: Optional[str],
        pushed: Optional[List[Dict[str, Any]]] = None, owned: bool = False, **facts: Any) -> Tuple[ImageRecord, bool]:
    """Put a SIF whose digest the caller computed into the store (`images import`, `pull`, `sign`): (its record,
    whether it was new). Copied beside the store first and renamed into place, under the index lock only for the
    check and the rename, so two imports of one file at once leave one store copy and one record; a stored SIF is
    never rewritten. `facts`: what the caller knows of the build (its content key, the image it was signed from)."""
    store = root / STORE
    store.mkdir(parents=True, exist_ok=True)
    stored = store / f"{sha256}.sif"
    tmp = store / f".{sha256}.{os.getpid()}.tmp"
    if owned:  # a file this process made (a pull into the store's directory): moved, not copied
        os.replace(sif, tmp)
    else:  # a user's file: a copy, never a link, so no later write to it reaches the store
        shutil.copyfile(sif, tmp)
    try:
        if sha256_file(tmp) != sha256:
            raise UserError(f"{sif} changed while it was copied into the store; import it again")
        with _index_lock(root):
            known = find(sha256, root)
            if known is not None:
                return known, False
            if not stored.exists():
                os.replace(tmp, stored)
            entry = ImageRecord(**{"def_sha256": "", "lock_sha256": "", "inputs_sha256": "", **facts},
                                flavor=flavor, path=str(stored.resolve()), sha256=sha256, size=stored.stat().st_size,
                                built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), git_commit=git_commit,
                                pushed=list(pushed or []))
            _write_index(root, _read_index(root) + [entry])
            return entry, True
    finally:
        tmp.unlink(missing_ok=True)


def note_push(sha256: str, reference: str, plain_http: bool, root: Path) -> None:
    """Record where an image was pushed, on every record of its digest."""
    with _index_lock(root):
        entries = _read_index(root)
        for entry in entries:
            if entry.sha256 == sha256 and reference not in [p["reference"] for p in entry.pushed]:
                entry.pushed.append({"reference": reference, "plain_http": plain_http})
        _write_index(root, entries)


def current(flavor: str, root=Path("images")) -> Optional[ImageRecord]:
    """The latest recorded build of a flavor whose store file still exists."""
    for entry in reversed(_read_index(Path(root))):
        if entry.flavor == flavor and Path(entry.path).is_file():
            return entry
    return None


def find(sha256: str, root=Path("images")) -> Optional[ImageRecord]:
    """The record of the image with this digest, if its store file still exists."""
    for entry in reversed(_read_index(Path(root))):
        if entry.sha256 == sha256 and Path(entry.path).is_file():
            return entry
    return None


def verified(sha256: str, root: Path, what: str) -> ImageRecord:
    """The store's image with this digest, its bytes checked: refused when it is gone or was modified in place."""
    record = find(sha256, root)
    if record is None:
        raise UserError(f"{what} (sha256 {sha256}) is not in the image store {root}; copy that SIF here and run "
                        f"bin/run-cluster images import FILE.sif --expect-sha256 {sha256}")
    if sha256_file(record.path) != sha256:
        raise UserError(f"the store copy {record.path} of {what} was tampered with: its sha256 is no longer "
                        f"{sha256}; restore the original file to rerun exactly")
    return record


def named(image: str, root: Path) -> ImageRecord:
    """A flavor's current image or the image of a digest, its bytes checked."""
    entry = current(image, root) or find(image.removeprefix("sha256:"), root)
    if entry is None:
        raise UserError(f"no image {image!r} in {root} (a flavor or a sha256); see bin/run-cluster images list")
    return verified(entry.sha256, root, f"the {entry.flavor} image")


def records(root=Path("images")) -> List[ImageRecord]:
    """Every record of the index, oldest first."""
    return _read_index(Path(root))


def _link_or_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        os.link(src, tmp)
    except OSError:  # another file system, or one without hard links: a copy keeps the bytes as well
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _read_index(root: Path) -> List[ImageRecord]:
    index = root / INDEX
    if not index.is_file():
        return []
    fields = {f.name for f in dataclasses.fields(ImageRecord)}
    entries = []
    for item in _index_items(index):
        item = {k: v for k, v in item.items() if k in fields}
        item.setdefault("inputs_sha256", "")
        item.setdefault("git_commit", None)
        item.setdefault("pushed", [])
        path = Path(item["path"])
        item["path"] = str(path if path.is_absolute() else (root / path).resolve())
        entries.append(ImageRecord(**item))
    return entries


def _index_items(index: Path) -> List[dict]:
    damaged = f"the image index {index} is damaged"
    try:
        items = json.loads(index.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{damaged} (not JSON); restore it, or move it aside and rebuild with make image") from None
    needed = {"flavor", "path", "sha256", "def_sha256", "lock_sha256", "size", "built_at"}
    if not isinstance(items, list) or not all(isinstance(i, dict) and needed <= set(i) for i in items):
        raise UserError(f"{damaged} (not a list of image records); restore it, or move it aside and rebuild")
    return items


def _write_index(root: Path, entries: List[ImageRecord]) -> None:
    items = []
    for entry in entries:
        item = dataclasses.asdict(entry)
        path = Path(entry.path)
        try:  # store paths are kept relative to the images directory, so it can move
            item["path"] = str(path.relative_to(root.resolve()))
        except ValueError:
            pass
        items.append(item)
    atomic_write(root / INDEX, json.dumps(items, indent=2) + "\n")


def atomic_write(path: Path, text: str) -> None:
    """Write a temporary file beside `path`, then rename it over: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _index_lock:
    def __init__(self, root: Path):
        self.path = root / ".index.lock"

    def __enter__(self):
        self.f = open(self.path, "a")
        if fcntl is not None:
            fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.f.close()


def _git_commit(cwd=None) -> Optional[str]:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=cwd)
    except OSError:
        return None
    return done.stdout.strip() or None
