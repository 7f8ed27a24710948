"""Where the project's own folders are: the checkout that holds this package."""
import os
from pathlib import Path
from typing import Dict, Optional

from train.host.jobs import code_snapshot

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "clusters"
EXPERIMENTS = ROOT / "experiments"


def images_dir(*configured: Optional[str]) -> Path:
    """The image store: $CT_IMAGES, else the first store configured (the user's settings `images:`, then the
    cluster file's `images:`, a lab's shared store), else images/ of this checkout."""
    chosen = os.environ.get("CT_IMAGES") or next((c for c in configured if c), None)
    return Path(chosen).expanduser() if chosen else ROOT / "images"


def runs_dir() -> Path:
    return Path(os.environ.get("CT_RUNS_DIR", ROOT / "runs"))


def git_state() -> Dict[str, object]:
    """The commit the job was submitted from, and whether the tree had uncommitted changes."""
    commit, dirty = code_snapshot.git_state(ROOT)  # the one way this package asks git
    return {"commit": commit, "dirty": dirty if commit else None}
