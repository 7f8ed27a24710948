"""UFC-10 layout: the generator's output reads back, a hand-made
seed-layout folder reads, bad layouts fail in one line."""
import csv

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("PIL")
import numpy as np  # noqa: E402

from cluster_train.shared.config import DataConfig  # noqa: E402
from cluster_train.image.data import ufc10_format as fmt  # noqa: E402
from cluster_train.image.data.avi import read_avi_frames  # noqa: E402
from cluster_train.image.data.ufc10 import VideoDataModule, generate_ufc10  # noqa: E402
from cluster_train.shared.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def ufc(tmp_path_factory):
    return generate_ufc10(tmp_path_factory.mktemp("ufc10"), train_per_class=2, val_per_class=1, test_per_class=1,
                          size=16)


def test_generated_set_follows_the_layout_and_loads_as_clips(ufc):
    assert (ufc / "metadata" / "train.csv").is_file()
    assert (ufc / "frames" / "train" / "right_slow" / "v_right_slow_train_000" / "frame_0.jpg").is_file()
    video = ufc / "videos" / "train" / "right_slow" / "v_right_slow_train_000.avi"
    frames = read_avi_frames(video)
    assert len(frames) == 8 and frames[0].shape == (16, 16, 3)
    data = VideoDataModule(DataConfig(root=str(ufc), batch_size=4, num_workers=0), num_frames=8)
    data.setup()
    assert len(data.train_set) == 20 and len(data.val_set) == 10 and len(data.test_set) == 10
    x, y = next(iter(data.train_dataloader()))
    assert x.shape == (4, 8, 3, 16, 16) and y.shape == (4,)


def test_reads_a_hand_made_folder_in_the_seeds_layout(tmp_path):
    from PIL import Image

    from cluster_train.image.data.avi import write_avi

    rows = []
    for label, action in enumerate(["Basketball", "Diving"]):
        for split in ("train", "val", "test"):
            name = f"v_{action}_g01_c01"
            folder = tmp_path / "frames" / split / action / name
            folder.mkdir(parents=True)
            images = [np.full((20, 20, 3), 25 * k, np.uint8) for k in range(10)]
            for k, image in enumerate(images):
                Image.fromarray(image).save(folder / f"frame_{k + 1}.jpg")  # numbered from 1, out of lexical order
            write_avi(tmp_path / "videos" / split / action / f"{name}.avi", images)
            rows.append((split, name, action, label))
    (tmp_path / "metadata").mkdir()
    for split in ("train", "val", "test"):
        with open(tmp_path / "metadata" / f"{split}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["video_name", "action", "label"])
            writer.writerows(r[1:] for r in rows if r[0] == split)
    videos = fmt.read_split(tmp_path, "train")
    assert [(v.name, v.action, v.label) for v in videos] == [("v_Basketball_g01_c01", "Basketball", 0),
                                                             ("v_Diving_g01_c01", "Diving", 1)]
    assert [p.name for p in videos[0].frames][:3] == ["frame_1.jpg", "frame_2.jpg", "frame_3.jpg"]
    clip = fmt.read_frames(videos[0], 4)
    assert clip.shape == (4, 20, 20, 3)
    assert clip[0].mean() < clip[-1].mean()  # first and last frames, in order


@pytest.mark.parametrize(
    "breaks, message",
    [
        (lambda root: (root / "metadata" / "val.csv").unlink(), r"metadata file .*val\.csv is missing"),
        (lambda root: (root / "videos" / "val" / "left_fast" / "v_left_fast_val_000.avi").unlink(),
         r"video file .*v_left_fast_val_000\.avi is missing"),
        (lambda root: [p.unlink() for p in (root / "frames" / "val" / "up_slow" / "v_up_slow_val_000").iterdir()],
         r"frame folder .*v_up_slow_val_000 is missing or has no frame"),
        (lambda root: (root / "metadata" / "val.csv").write_text("name,label\nx,1\n"),
         r"val\.csv must have the header video_name,action,label"),
    ],
)
def test_bad_layout_fails_with_one_line_naming_the_file(tmp_path, breaks, message):
    root = generate_ufc10(tmp_path, train_per_class=1, val_per_class=1, test_per_class=1, frames=4, size=16)
    breaks(root)
    with pytest.raises(UserError, match=message) as err:
        fmt.read_split(root, "val")
    assert "\n" not in str(err.value)
