"""The code a run executes, frozen at submission: a tar of the project's files, its sha256, and the git commit.

Tracked files as they are in the working tree (uncommitted changes included) plus untracked files git does not
ignore, like `git stash -u` would keep; every file of a directory that is not a git work tree. The tar is built
with fixed owners and times, so its sha256 names the content: a rerun checks the snapshot it copies against it.
Written by hand because no launcher we build on snapshots code (submitit and TorchX run the live directory).
"""
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.git import SENT_FROM, git, git_state
from cluster_train.host.images.store import sha256_file

TAR = "code.tar"  # in the run directory: the snapshot as submitted, never written by the job
DIR = "code"  # in the run directory: the snapshot unpacked, where the command runs
MAX_BYTES = 200 * 2**20  # code, not data: more than this is almost always a data set or checkpoints in the tree
MAX_FILES = 20_000  # likewise; the listing stops here, so `/` or a home directory is refused before it is walked
POINT_AT_CODE = "cd into your project's directory, or name it with code: in an experiment file"
SKIPPED = {".git", "__pycache__", ".pytest_cache", ".venv", ".mypy_cache", SENT_FROM}  # outside git: never code


@dataclass
class Snapshot:
    source: str  # the directory it was taken from
    tar_path: str  # a temporary tar until queued
    sha256: str
    files: int
    bytes: int
    git_commit: Optional[str] = None
    git_dirty: bool = False
    subtree: str = ""  # only this part of the tree (`cluster_train/` for --dev)
    dev: bool = False

    def record(self) -> Dict:
        """What the manifest keeps."""
        return {"source": self.source, "sha256": self.sha256, "files": self.files, "bytes": self.bytes,
                "git_commit": self.git_commit, "git_dirty": self.git_dirty, "subtree": self.subtree, "dev": self.dev}


def take(source: Path, subtree: str = "", dev: bool = False) -> Snapshot:
    """Snapshot `source` (only `subtree/` of it when given) into a temporary tar; refuse what is not code."""
    if not source.is_dir():
        raise UserError(f"code: {source} is not a directory; set code: to your project's directory")
    not_a_project(source)
    names = [n for n in project_files(source) if not subtree or n.startswith(subtree)]
    if not names:
        raise UserError(f"code: {source} holds no files{f' under {subtree}' if subtree else ''}; check code:")
    size = sum(_size(source, n) for n in names)
    if size > MAX_BYTES:
        largest = max(names, key=lambda n: _size(source, n))
        raise UserError(f"code: {source} holds {size / 2**20:.0f} MB in {len(names)} files (largest {largest}); keep "
                        f"data and checkpoints out of the code (add them to .gitignore, or read them as data)")
    handle, tar_path = tempfile.mkstemp(prefix="ct-code-", suffix=".tar")
    try:
        with os.fdopen(handle, "wb") as out:
            write_tar(source, names, out)
    except OSError as err:  # a file removed or made unreadable since it was listed
        Path(tar_path).unlink()
        raise UserError(f"code: {err.filename} could not be read into the snapshot ({err.strerror}); snapshot a "
                        f"directory that holds your code alone: {POINT_AT_CODE}") from None
    commit, dirty = git_state(source)
    return Snapshot(str(source), tar_path, sha256_file(Path(tar_path)), len(names), size, commit, dirty, subtree, dev)


def not_a_project(source: Path) -> None:
    """The file system's root or a home directory (or above one) is where a command was typed, not a project:
    snapshotting it would read /proc, caches and data."""
    home = Path.home().resolve()
    if source == Path("/") or source == home or source in home.parents:
        what = "the file system's root" if source == Path("/") else "a home directory"
        raise UserError(f"code: {source} is {what}, not a project; a run snapshots its code (at most {MAX_FILES} "
                        f"files, {MAX_BYTES >> 20} MB): {POINT_AT_CODE}")


def project_files(source: Path) -> List[str]:
    """Relative paths of the files that make up the code, sorted; refused past MAX_FILES."""
    listed = git(source, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if listed is not None and git(source, "rev-parse", "--show-prefix") == "\n":  # source is the work tree's root
        names = [n for n in listed.split("\0") if n]
        _at_most(source, len(names))
        return sorted(n for n in names if os.path.lexists(source / n))  # a deleted file is listed until committed
    found = []
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        found += [os.path.relpath(os.path.join(root, f), source) for f in files
                  if not f.endswith(".pyc") and f not in SKIPPED]
        _at_most(source, len(found))
    return sorted(found)


def _at_most(source: Path, files: int) -> None:
    if files > MAX_FILES:
        raise UserError(f"code: {source} holds more than {MAX_FILES} files; a run snapshots code, not data or "
                        f"environments: {POINT_AT_CODE} (or .gitignore what is not code)")


def _size(source: Path, name: str) -> int:
    """A listed file's size; 0 for one gone since the listing (the tar then names what is missing)."""
    try:
        return (source / name).lstat().st_size
    except FileNotFoundError:
        return 0


def write_tar(source: Path, names: List[str], out) -> None:
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            info = tar.gettarinfo(str(source / name), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if info.mode & 0o100 else 0o644
            if info.isreg():
                with open(source / name, "rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)


def from_run(run_dir: Path, recorded: Dict) -> Snapshot:
    """A recorded run's snapshot, checked against its manifest, for --rerun and resume."""
    tar_path = run_dir / TAR
    if not tar_path.is_file():
        raise UserError(f"{run_dir} has no {TAR}: the code it ran is gone; submit anew from your project")
    digest = sha256_file(tar_path)
    if digest != recorded.get("sha256"):
        raise UserError(f"{tar_path} has sha256 {digest[:12]}, not the {str(recorded.get('sha256'))[:12]} its "
                        f"manifest records: the snapshot was changed; submit anew from your project")
    fields = {k: recorded.get(k) for k in ("source", "files", "bytes", "git_commit", "git_dirty", "subtree", "dev")}
    return Snapshot(tar_path=str(tar_path), sha256=digest, **fields)


def read_text(snapshot: Snapshot, name: str) -> Optional[str]:
    """One file of the snapshot (what the job will read), or None where it holds none by that name."""
    with tarfile.open(snapshot.tar_path) as tar:
        try:
            member = tar.extractfile(os.path.normpath(name))
        except KeyError:
            return None
        return member.read().decode("utf-8", errors="replace") if member else None


def holds(snapshot: Snapshot, name: str) -> bool:
    """Whether the snapshot holds a file by that name (relative to its top)."""
    with tarfile.open(snapshot.tar_path) as tar:
        try:
            return tar.getmember(os.path.normpath(name)).isfile()
        except KeyError:
            return False


def place(snapshot: Snapshot, run_dir: Path) -> None:
    """Put the snapshot into the run directory (a resumed run has it there already) and unpack it: the directory
    the job runs the code from."""
    if Path(snapshot.tar_path) == run_dir / TAR:
        return
    if is_temporary(snapshot):
        shutil.move(snapshot.tar_path, run_dir / TAR)
    else:  # a rerun: the earlier run keeps its own copy
        shutil.copyfile(snapshot.tar_path, run_dir / TAR)
    snapshot.tar_path = str(run_dir / TAR)
    with tarfile.open(run_dir / TAR) as tar:
        tar.extractall(run_dir / DIR, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))


def discard(snapshot: Optional[Snapshot]) -> None:
    """Remove a snapshot that was not queued (a dry run, a refused submission)."""
    if snapshot and is_temporary(snapshot):
        Path(snapshot.tar_path).unlink(missing_ok=True)


def is_temporary(snapshot: Snapshot) -> bool:
    return (Path(snapshot.tar_path).name.startswith("ct-code-")
            and Path(snapshot.tar_path).parent == Path(tempfile.gettempdir()))
