"""The one way cluster_train/host asks git: a command's output, or None where there is no git or no repository."""
import json
import subprocess
from pathlib import Path
from typing import Optional

# at the root of a checkout's copy sent over ssh (cluster_train/host/remote): its commit
SENT_FROM = ".ct-sent-from.json"


def git_state(source: Path):
    """(HEAD's commit, whether the tree has uncommitted changes); outside a repository, those of the checkout a copy
    sent over ssh came from (the copy has no .git), else (None, False)."""
    commit = git(source, "rev-parse", "HEAD")
    if commit is None:
        return sent_from(Path(source))
    return commit.strip(), bool(git(source, "status", "--porcelain", "--untracked-files=normal"))


def sent_from(source: Path):
    """The state recorded in the copy holding `source` (its directory or one above), else (None, False)."""
    for directory in (source, *source.resolve().parents):
        record = directory / SENT_FROM
        if record.is_file():
            try:
                sent = json.loads(record.read_text())
            except ValueError:  # cut short by a dropped connection: the next submission writes it again
                return None, False
            return sent.get("commit"), bool(sent.get("dirty"))
    return None, False


def git(source: Path, *args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
