"""Does the image a new run would use hold this checkout's code? A job runs the code inside its image, not the
checkout's: an image built before the train package or the definition files changed would train with the old code
while the manifest says only `dirty: true`. The content key `make image` records with each build says which.
The same key, kept in git as containers/<flavor>.tested, says whether CI must build an image it cannot run (CUDA)."""
from pathlib import Path
from typing import List, Optional

from train.host.images import store as images


def stale_inputs(record: images.ImageRecord, repo: Path) -> Optional[str]:
    """None when the image was built from the checkout's current inputs (or its inputs are unknown: imported,
    pulled); else what differs, named by file where the build's stamp still lists them."""
    if record.parent_sha256:  # a derived image runs the code of the image it was built on
        parent = images.find(record.parent_sha256, Path(record.path).parents[1])
        return stale_inputs(parent, repo) if parent else None
    def_file, lock_file = f"containers/{record.flavor}.def", f"containers/{record.flavor}.lock"
    if not record.inputs_sha256 or not (repo / def_file).is_file():
        return None
    text = images.inputs_text(def_file, lock_file, repo)
    if images.sha256_text(text) == record.inputs_sha256:
        return None
    stamp = Path(record.path).parents[1] / f"{record.flavor}.inputs"  # <store>/<flavor>.inputs, written by make image
    if stamp.is_file() and images.sha256_text(stamp.read_text()) == record.inputs_sha256:
        changed = _changed(stamp.read_text(), text)
        if changed:
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            return ", ".join(changed[:3]) + more
    return "its definition, lock file or train package"


def _changed(built: str, now: str) -> List[str]:
    """Paths whose sha256 differs between two `sha256  path` listings, or that only one of them has."""
    def table(text: str) -> dict:
        return {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in text.splitlines() if "  " in line}
    old, new = table(built), table(now)
    return sorted(path for path in old.keys() | new.keys() if old.get(path) != new.get(path))


def tested_key(flavor: str, repo=Path(".")) -> Path:
    """containers/<flavor>.tested, kept in git: the content key of the last build of FLAVOR whose %test passed
    (`make image` writes it), so that CI builds an image it cannot run (CUDA) only when that image's inputs changed."""
    return Path(repo) / "containers" / f"{flavor}.tested"


def untested_inputs(flavor: str, repo=Path(".")) -> List[str]:
    """The inputs whose content differs from that tested build (every input when none was kept); [] when none."""
    key = tested_key(flavor, repo)
    now = images.inputs_text(f"containers/{flavor}.def", f"containers/{flavor}.lock", repo)
    return _changed(key.read_text() if key.is_file() else "", now)
