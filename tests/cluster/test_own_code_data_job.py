"""Data for your own code in a real job (issue 56 item 4): a command run with --data DIR reads DIR through
$CT_DATA_ROOT at the same path and cannot write it, and the manifest records its digest; the same command on a
packed data image reads it at the documented mount point. Local jobs, in the built CPU image: the binds are the
apptainer arguments every scheduler's script shares (the host side: tests/host/test_own_code_data.py)."""
import dataclasses
import json
import os
import shutil

import pytest
from conftest import job_logs, manifest, run_cluster

from cluster_train.host.data import directory

pytestmark = [pytest.mark.image]
TRAIN = """import errno, os, pathlib
root = pathlib.Path(os.environ["CT_DATA_ROOT"])
print("data at", root, "reads", (root / "input.txt").read_text().strip())
try:
    (root / "written").write_text("x")
    print("data written")
except OSError as err:
    print("data not writable:", errno.errorcode[err.errno])
"""


@pytest.fixture
def env(tmp_path, cpu_image):
    """An image store of this test's own, holding the built CPU image's record and an empty data store."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "index.json").write_text(json.dumps([dataclasses.asdict(cpu_image)]))
    (tmp_path / "runs").mkdir()
    return {**os.environ, "CT_IMAGES": str(images), "CT_RUNS_DIR": str(tmp_path / "runs")}


def submit(code, env, *args):
    done = run_cluster("local", "cpu_1proc", *args, "--wait", "--stale-image-ok", "--", "python", "train.py",
                       cwd=code, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    return done


@pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="mksquashfs packs data images: make apptainer")
def test_a_command_reads_its_data_read_only_from_a_directory_and_from_a_data_image(tmp_path, env):
    code, data = tmp_path / "proj", tmp_path / "mydata"
    code.mkdir()
    data.mkdir()
    (code / "train.py").write_text(TRAIN)
    (data / "input.txt").write_text("from the directory\n")
    submit(code, env, "--data", str(data), "--run-id", "on-dir")
    run_dir = tmp_path / "runs" / "on-dir"
    log = job_logs(run_dir)
    assert f"data at {data} reads from the directory\n" in log and "data not writable: EROFS" in log, log[-3000:]
    assert not (data / "written").exists()
    assert manifest(run_dir)["data"] == directory.record(str(data))
    (data / "input.txt").write_text("from the image\n")
    packed = run_cluster("data", "pack", str(data), "--name", "mine", env=env)
    assert packed.returncode == 0, packed.stderr
    submit(code, env, "--set", "data.image=mine", "--run-id", "on-image")
    log = job_logs(tmp_path / "runs" / "on-image")
    assert "data at /mnt/ct-data reads from the image\n" in log and "data not writable: EROFS" in log, log[-3000:]
    assert manifest(tmp_path / "runs" / "on-image")["data"]["name"] == "mine"
