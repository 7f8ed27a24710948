"""The CIFAR-100 "python version" on-disk format, as torchvision's `CIFAR100` reads it (numpy only).

Layout: ROOT/cifar-100-python/{train,test,meta}; `train`/`test` are pickled dicts with `data` (N x 3072 uint8,
channel-major 32x32 planes), `fine_labels`, `coarse_labels`, `filenames`, `batch_label`; `meta` holds
`fine_label_names` and `coarse_label_names`.
"""
import pickle
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from cluster_train.shared.errors import UserError

FOLDER = "cifar-100-python"
SPLITS = ("train", "test")


def read_split(root, split: str) -> Tuple[np.ndarray, np.ndarray]:
    """Images as (N, 32, 32, 3) uint8 and fine labels as (N,) int64."""
    entry = _load(Path(root) / FOLDER / split)
    for key in ("data", "fine_labels"):
        if key not in entry:
            raise UserError(f"{Path(root) / FOLDER / split} has no {key!r} entry; is it a "
                            "CIFAR-100 python-format file?")
    data = np.asarray(entry["data"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072:
        raise UserError(f"{Path(root) / FOLDER / split}: 'data' has shape {data.shape}, expected (N, 3072)")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return images, np.asarray(entry["fine_labels"], dtype=np.int64)


def read_class_names(root) -> List[str]:
    return list(_load(Path(root) / FOLDER / "meta")["fine_label_names"])


def write_split(root, split: str, images: np.ndarray, fine: np.ndarray, coarse: np.ndarray) -> None:
    names = [f"synthetic_{split}_{i:05d}.png" for i in range(len(images))]
    entry = {
        "filenames": names,
        "batch_label": f"{split} batch 1 of 1",
        "fine_labels": [int(x) for x in fine],
        "coarse_labels": [int(x) for x in coarse],
        "data": images.transpose(0, 3, 1, 2).reshape(len(images), 3072).astype(np.uint8),
    }
    _dump(Path(root) / FOLDER / split, entry)


def write_meta(root, fine_names: List[str], coarse_names: List[str]) -> None:
    _dump(Path(root) / FOLDER / "meta", {"fine_label_names": fine_names, "coarse_label_names": coarse_names})


def _load(path: Path) -> Dict:
    if not path.is_file():
        raise UserError(
            f"CIFAR-100 file {path} is missing; expected {path.parent}/{{train,test,meta}} "
            f"(generate a small set with: python -m train make_data cifar100 {path.parent.parent})"
        )
    try:
        with path.open("rb") as f:
            return pickle.load(f, encoding="latin1")  # the published files are Python 2 pickles
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        raise UserError(f"CIFAR-100 file {path} is not a readable pickle ({err}); "
                        "regenerate or re-download it") from None


def _dump(path: Path, entry: Dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump(entry, f, protocol=2)
