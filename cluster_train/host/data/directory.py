"""A data directory's digest: what the manifest records of the directory a command reads (data.root, --data DIR), and
what --rerun checks before it queues anything, so a rerun reads the same data or says it cannot.

Two methods, named in the record, after git-annex's backends (DVC's `.dir` hash is the first kind):
    content  sha256 over every file's relative path, size and content sha256 (git-annex SHA256), where the directory
             holds at most CONTENT_MAX_BYTES in CONTENT_MAX_FILES files: a few seconds of a login node's CPU at most;
    listing  sha256 over every file's relative path, size and modification time (git-annex WORM), beyond that: one
             stat per file, cheap for a terabyte; blind to an edit that keeps size and mtime, and a copy that does not
             keep mtimes (cp without -p) reads as changed.
More than LIST_MAX_FILES files are not walked at all (minutes on a shared file system): the record says so and a
rerun cannot check them; a data image (`bin/run-cluster data pack`) is the digest for such a set.
"""
import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.images.store import sha256_file

CONTENT_MAX_BYTES = 256 * 2**20
CONTENT_MAX_FILES = 5_000
LIST_MAX_FILES = 200_000
KIND = "directory"  # a data image's record (cluster_train/host/data/binding.py) has no kind

Entry = Tuple[str, int, int]  # relative path, size, mtime in ns
_HASHED: Dict[Tuple[str, str, Tuple[Entry, ...]], str] = {}


def listing(root: Path) -> Optional[List[Entry]]:
    """Every file under root (symlinks followed to what they name, as the job reads them), sorted; None past
    LIST_MAX_FILES."""
    if root.is_file():  # data.root may name one file
        st = root.stat()
        return [(".", st.st_size, st.st_mtime_ns)]
    found: List[Entry] = []
    for top, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            try:
                st = os.stat(path)
            except OSError:  # a dangling symlink: nothing the job could read either
                continue
            found.append((os.path.relpath(path, root), st.st_size, st.st_mtime_ns))
        if len(found) > LIST_MAX_FILES:
            return None
    return found


def record(root: str) -> Dict[str, Any]:
    """The manifest's record of the data directory at `root` (checked to exist before)."""
    entries = listing(Path(root))
    if entries is None:
        return {"kind": KIND, "root": root, "method": "none", "digest": None,
                "note": f"more than {LIST_MAX_FILES} files: not digested (pack it as a data image for a digest)"}
    size = sum(e[1] for e in entries)
    method = "content" if size <= CONTENT_MAX_BYTES and len(entries) <= CONTENT_MAX_FILES else "listing"
    return {"kind": KIND, "root": root, "method": method, "digest": digest(Path(root), entries, method),
            "files": len(entries), "bytes": size}


def digest(root: Path, entries: List[Entry], method: str, cached: bool = True) -> str:
    """The method's sha256 of the files; a content digest is kept per listing (path, size, mtime) for this process,
    so the summary and the manifest (and a sweep's elements) hash the bytes once; a rerun's check hashes them anew."""
    key = (str(root), method, tuple(entries))
    if cached and key in _HASHED:
        return _HASHED[key]
    whole = hashlib.sha256()
    for rel, size, mtime in entries:
        third = sha256_file(root / rel if rel != "." else root) if method == "content" else str(mtime)
        whole.update(f"{rel}\0{size}\0{third}\n".encode("utf-8", "surrogateescape"))
    if method == "content":  # at most CONTENT_MAX_FILES entries kept
        _HASHED[key] = whole.hexdigest()
    return whole.hexdigest()


def is_directory_record(data: Optional[Dict[str, Any]]) -> bool:
    return bool(data) and data.get("kind") == KIND


def now(recorded: Dict[str, Any]) -> Optional[str]:
    """The recorded directory's digest now, by the recorded method; None where it cannot be told (not digested)."""
    root = Path(recorded["root"])
    if recorded.get("method") not in ("content", "listing") or not recorded.get("digest"):
        return None
    if not root.exists():
        return "missing"
    entries = listing(root)
    if entries is None:
        return "more files"
    if recorded["method"] == "content" and (len(entries), sum(e[1] for e in entries)) != \
            (recorded.get("files"), recorded.get("bytes")):
        return "other files"  # not hashed again: the files or their sizes differ already
    return digest(root, entries, recorded["method"], cached=False)


def check_rerun(run_dir: Path, manifest, user_set: Dict[str, Any]) -> None:  # manifest: runs.manifest.Manifest
    """--rerun reads the data directory its run read, unchanged, or refuses before anything is queued; a --data or
    --set data.root given to the rerun is the user's choice of data, not checked against the record."""
    recorded = manifest.data
    if not is_directory_record(recorded) or "data.root" in user_set:
        return
    found = now(recorded)
    if found is None or found == recorded["digest"]:
        return
    root = recorded["root"]
    what = {"missing": "it is gone", "more files": f"it now holds more than {LIST_MAX_FILES} files",
            "other files": "other files or sizes now"}.get(found, f"{recorded['method']} sha256 {found[:12]} now")
    raise UserError(f"--rerun {run_dir}: the data directory {root} changed since the run read it ({what}, "
                    f"{recorded['method']} sha256 {recorded['digest'][:12]} then); restore it, or rerun with "
                    f"--data {root} to read it as it is now")


def summary_line(data: Optional[Dict[str, Any]]) -> List[str]:
    """The summary's line for a command's data directory: where the job sees it and what the manifest records."""
    if not is_directory_record(data):
        return []
    if data["method"] == "none":
        digested = data["note"]
    else:
        digested = f"{data['files']} file(s), {data['bytes'] / 2**20:.1f} MiB, {data['method']} sha256 " \
                   f"{data['digest'][:12]}"
    return [f"data: {data['root']} bound read-only at the same path ($CT_DATA_ROOT), {digested}"]
