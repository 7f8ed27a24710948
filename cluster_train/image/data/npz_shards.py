"""The on-disk format of the generated seed-003/004 sets (numpy only, no torch): a folder per data set holding

    meta.json                 {"format": "<name>/v1", "splits": {"train": ["train/shard_000.npz", ...], ...}, ...}
    <split>/shard_<k>.npz     arrays whose first axis is the sample (every shard of a set has the same array names)

meta.json also carries the set's own sizes (vocabulary, feature widths), so a reader never guesses them.
Shards keep each file small enough to copy and to memory-map one at a time on a cluster's shared file system.
"""
import json
from pathlib import Path
from typing import Dict, Iterable

import numpy as np

from cluster_train.shared.errors import UserError

SHARD_SAMPLES = 256  # samples per shard file


def write_set(root, format_name: str, splits: Dict[str, Dict[str, np.ndarray]], **facts) -> Path:
    """Write each split's arrays as shards and meta.json (the facts are its extra keys)."""
    root = Path(root)
    files = {name: _write_split(root, name, arrays) for name, arrays in splits.items()}
    meta = {"format": format_name, "splits": files, **facts}
    (root / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return root


def _write_split(root: Path, split: str, arrays: Dict[str, np.ndarray]) -> list:
    (root / split).mkdir(parents=True, exist_ok=True)
    count = len(next(iter(arrays.values())))
    files = []
    for k, start in enumerate(range(0, count, SHARD_SAMPLES)):
        relative = f"{split}/shard_{k:03d}.npz"
        np.savez(root / relative, **{key: value[start : start + SHARD_SAMPLES] for key, value in arrays.items()})
        files.append(relative)
    return files


def read_meta(root, format_name: str) -> dict:
    path = Path(root) / "meta.json"
    if not path.is_file():
        raise UserError(f"{path} is missing; write a set with: python -m train make_data <name> {root}")
    meta = json.loads(path.read_text())
    if meta.get("format") != format_name:
        raise UserError(f"{path} holds format {meta.get('format')!r}, this data set reads {format_name!r}")
    return meta


def read_split(root, meta: dict, split: str, names: Iterable[str]) -> Dict[str, np.ndarray]:
    """The split's arrays, its shards concatenated (the generated sets are small)."""
    shards = [np.load(Path(root) / relative) for relative in meta["splits"].get(split, [])]
    if not shards:
        raise UserError(f"{root}: the {split!r} split has no shards (meta.json)")
    return {name: np.concatenate([shard[name] for shard in shards]) for name in names}
