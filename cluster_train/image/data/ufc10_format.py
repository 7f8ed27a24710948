"""The UFC-10 on-disk layout of seed 000 (frames extracted from videos), read and written with Pillow.

    ROOT/metadata/<split>.csv                              header video_name,action,label; one row per video
    ROOT/frames/<split>/<action>/<video_name>/frame_<k>.jpg   the extracted frames, k = 0, 1, ...
    ROOT/videos/<split>/<action>/<video_name>.avi            the source video (MJPEG AVI here)

Splits are train, val and test. The loader trains on frames/ (decoding video is the slow part of every epoch);
videos/ must still be present, as the seed's users keep it, and a missing one is reported by name.
"""
import csv
import re
from pathlib import Path
from typing import List, NamedTuple

import numpy as np

from cluster_train.image.data import avi
from cluster_train.shared.errors import UserError

SPLITS = ("train", "val", "test")
COLUMNS = ("video_name", "action", "label")
_FRAME = re.compile(r"frame_(\d+)\.jpe?g$", re.IGNORECASE)


class Video(NamedTuple):
    name: str
    action: str
    label: int
    frames: List[Path]  # in frame-number order


def read_split(root, split: str) -> List[Video]:
    """The videos of one split, every file checked, so a bad layout fails before training starts."""
    root = Path(root)
    table = root / "metadata" / f"{split}.csv"
    if not table.is_file():
        raise UserError(
            f"UFC-10 metadata file {table} is missing; expected {root}/metadata/{{train,val,test}}.csv "
            f"(generate a small set with: python -m train make_data ufc10 {root})"
        )
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or any(c not in rows[0] for c in COLUMNS):
        raise UserError(f"{table} must have the header {','.join(COLUMNS)} and at least one row")
    videos = []
    for line, row in enumerate(rows, start=2):
        name, action = row["video_name"].strip(), row["action"].strip()
        try:
            label = int(row["label"])
        except ValueError:
            raise UserError(f"{table} line {line}: label {row['label']!r} is not an integer") from None
        video = root / "videos" / split / action / f"{name}.avi"
        if not video.is_file():
            raise UserError(f"video file {video} is missing (listed in {table} line {line})")
        folder = root / "frames" / split / action / name
        frames = sorted((p for p in folder.glob("frame_*") if _FRAME.search(p.name)), key=_frame_number)
        if not frames:
            raise UserError(f"frame folder {folder} is missing or has no frame_<k>.jpg files "
                            f"(listed in {table} line {line})")
        videos.append(Video(name, action, label, frames))
    return videos


def read_frames(video: Video, num_frames: int) -> np.ndarray:
    """`num_frames` evenly spaced frames as (T, H, W, 3) uint8."""
    from PIL import Image

    picks = np.linspace(0, len(video.frames) - 1, num_frames).round().astype(int)
    try:
        return np.stack([np.asarray(Image.open(video.frames[i]).convert("RGB")) for i in picks])
    except OSError as err:
        raise UserError(f"cannot read a frame of {video.frames[0].parent}: {err}") from None


def write_video(root, split: str, action: str, name: str, frames: np.ndarray) -> None:
    """Write one video's frames (T, H, W, 3) uint8 as both frame JPEGs and an MJPEG AVI."""
    from PIL import Image

    folder = Path(root) / "frames" / split / action / name
    folder.mkdir(parents=True, exist_ok=True)
    for k, frame in enumerate(frames):
        Image.fromarray(frame).save(folder / f"frame_{k}.jpg", quality=90)
    avi.write_avi(Path(root) / "videos" / split / action / f"{name}.avi", list(frames))


def write_metadata(root, split: str, rows: List[tuple]) -> None:
    path = Path(root) / "metadata" / f"{split}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def _frame_number(path: Path) -> int:
    return int(_FRAME.search(path.name).group(1))
