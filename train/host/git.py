"""The one way train/host asks git: a command's output, or None where there is no git or no repository."""
import subprocess
from pathlib import Path
from typing import Optional


def git_state(source: Path):
    """(HEAD's commit, whether the tree has uncommitted changes); (None, False) outside a repository."""
    commit = git(source, "rev-parse", "HEAD")
    if commit is None:
        return None, False
    return commit.strip(), bool(git(source, "status", "--porcelain", "--untracked-files=normal"))


def git(source: Path, *args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
