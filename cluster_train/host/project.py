"""Where the project's own folders are: the checkout that holds this package."""
import os
import re
import tempfile
from pathlib import Path
from typing import Dict, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import git, undecodable

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "clusters"
EXPERIMENTS = ROOT / "experiments"
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,119}$")  # a file name, a directive value, a log prefix


def images_dir(*configured: Optional[str]) -> Path:
    """The image store: $CT_IMAGES, else the first store configured (the user's settings `images:`, then the
    cluster file's `images:`, a lab's shared store), else images/ of this checkout."""
    return chosen_dir("CT_IMAGES", "images", configured, ROOT / "images")


def runs_dir(*configured: Optional[str]) -> Path:
    """Where run directories go: $CT_RUNS_DIR, else the first root configured (the user's settings `runs:`, then the
    cluster file's, usually on scratch), else runs/ of this checkout."""
    return chosen_dir("CT_RUNS_DIR", "runs", configured, ROOT / "runs")


def chosen_dir(variable: str, key: str, configured, default: Path) -> Path:
    """$variable, else the first value configured, else the default; one that names a file is refused."""
    value = undecodable.environ(variable)
    named = f"${variable}" if value else f"{key}:"
    value = value or next((c for c in configured if c), None)
    path = Path(value).expanduser() if value else default
    if path.exists() and not path.is_dir():
        raise UserError(f"{named} {path} is a file, not a directory; point {named.rstrip(':')} at a directory "
                        f"(it is created if missing)")
    return path


def existing(path: Path) -> Path:
    """The path, or its nearest parent that exists: a store or a run root is made by its first write."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return path


def check_writable(path: Path, named: str, fix: str) -> None:
    """Refuse, before anything is written, a directory that cannot be made or written there: under a file, on a
    read-only file system, in /proc. A directory made and removed at once in its nearest existing parent proves it
    (access(2) says yes to root where mkdir then fails); the path itself is not made."""
    here = existing(path)
    if not here.is_dir():
        raise UserError(f"{named} {path} cannot be made: {here} is a file, not a directory; {fix}")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ct-writable-", dir=here))
    except OSError as err:
        raise UserError(f"{named} {path} cannot be written: no directory can be made in {here} ({err.strerror}); "
                        f"{fix}") from None


def run_dir_for(run_id: str, root: Optional[Path] = None) -> Path:
    """runs/<run_id>, refusing an id that could leave runs/ or break the script it is written into."""
    if not RUN_ID.match(run_id):
        shown = run_id if len(run_id) <= 60 else run_id[:60] + "..."
        raise UserError(f"run id {shown!r} must be 1-120 letters, digits, '.', '_' or '-' (starting with a letter "
                        f"or digit); choose another --run-id")
    return ((root or runs_dir()) / run_id).resolve()


def git_state() -> Dict[str, object]:
    """The commit the job was submitted from, and whether the tree had uncommitted changes."""
    commit, dirty = git.git_state(ROOT)  # the one way this package asks git
    return {"commit": commit, "dirty": dirty if commit else None}
