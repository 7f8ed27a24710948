"""What a command's code snapshot leaves out because git ignores it, said in the summary before queueing: projects
ignore their data (nanoGPT's `*.bin`, `input.txt`), and a script that reads it would fail only after its wait in the
queue. The summary names a count, the largest few with their sizes, and the bind that would bring them (--data DIR).
Only for a git work tree's root, the one case where cluster_train/host/jobs/code_snapshot.py leaves ignored files out.
"""
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.host.git import git
from cluster_train.host.jobs.code_snapshot import MAX_FILES, SKIPPED

SHOWN = 3  # files named in the summary line
NOT_DATA = (".pyc", ".pyo")  # ignored, and never what a command reads


@dataclass
class LeftOut:
    source: str
    files: int = 0
    bytes: int = 0  # of the first MAX_FILES: past that, a lower bound ("at least")
    largest: List[Tuple[str, int]] = field(default_factory=list)
    bind: str = ""  # the directory a --data would bind: the one that holds them all


def find(source: Path, data_root: str = "") -> Optional[LeftOut]:
    """The git-ignored files of `source` (a work tree's root), but for those under data_root (bound already) and
    the never-code ones the snapshot skips too; None where there are none, or source is no work tree's root."""
    if git(source, "rev-parse", "--show-prefix") != "\n":
        return None
    listed = git(source, "ls-files", "-z", "--others", "--ignored", "--exclude-standard")
    names = [n for n in (listed or "").split("\0") if n and kept(source, n, data_root)]
    if not names:
        return None
    sizes = [(n, size_of(source / n)) for n in names[:MAX_FILES]]
    largest = sorted(sizes, key=lambda item: (-item[1], item[0]))[:SHOWN]
    common = os.path.commonpath([os.path.dirname(n) or "." for n in names]) if len(names) > 1 else \
        (os.path.dirname(names[0]) or ".")
    return LeftOut(str(source), len(names), sum(s for _, s in sizes), largest,
                   os.path.normpath(os.path.join(str(source), common)))


def kept(source: Path, name: str, data_root: str) -> bool:
    if name.endswith(NOT_DATA) or any(part in SKIPPED for part in Path(name).parts):
        return False
    return not (data_root and is_under(os.path.realpath(source / name), os.path.realpath(data_root)))


def is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def summary_lines(found: Optional[LeftOut]) -> List[str]:
    """One line: quiet where nothing is left out."""
    if not found:
        return []
    total = f"{'at least ' if found.files > MAX_FILES else ''}{found.bytes / 2**20:.1f} MiB"
    named = ", ".join(f"{name} ({size / 2**20:.1f} MiB)" for name, size in found.largest)
    more = f", and {found.files - len(found.largest)} more" if found.files > len(found.largest) else ""
    return [f"left out of the code snapshot (git ignores them): {found.files} file(s), {total}: {named}{more}; "
            f"your command sees them only through a read-only bind: --data {found.bind} (then $CT_DATA_ROOT)"]
