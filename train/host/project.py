"""Where the project's own folders are: the checkout that holds this package."""
import os
import subprocess
from pathlib import Path
from typing import Dict

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "clusters"
EXPERIMENTS = ROOT / "experiments"


def images_dir() -> Path:
    return Path(os.environ.get("CT_IMAGES_DIR", ROOT / "images"))


def runs_dir() -> Path:
    return Path(os.environ.get("CT_RUNS_DIR", ROOT / "runs"))


def git_state() -> Dict[str, object]:
    """The commit the job was submitted from, and whether the tree had uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    return {"commit": commit or None, "dirty": bool(git("status", "--porcelain")) if commit else None}
