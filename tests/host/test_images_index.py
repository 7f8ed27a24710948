"""cluster_train.host.images.store and .content_key: the image store and index, and the content key `make image`
rebuilds on (no Apptainer)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_train.host.images import content_key, store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def built(tmp_path):
    """A fake 'built image' and the inputs `make image` would record with it."""
    (tmp_path / "images").mkdir()
    sif = tmp_path / "images" / "cpu.sif"
    sif.write_bytes(b"not really a SIF, but hashed like one\n" * 1000)
    def_file = tmp_path / "cpu.def"
    def_file.write_text("Bootstrap: debootstrap\n")
    lock_file = tmp_path / "cpu.lock"
    lock_file.write_text("fire==0.7.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    return tmp_path, sif, def_file, lock_file


def test_sha256_file_streams_large_files(tmp_path):
    import hashlib

    path = tmp_path / "big"
    data = os.urandom(3 * (1 << 20) + 17)  # spans several read blocks
    path.write_bytes(data)
    assert store.sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_record_hard_links_into_the_store_and_indexes(built):
    tmp_path, sif, def_file, lock_file = built
    root = tmp_path / "images"
    entry = store.record("cpu", sif, def_file, lock_file, root=root, inputs_sha256="ab" * 32, git_commit="c0ffee")
    stored = root / "store" / f"{entry.sha256}.sif"
    assert entry.path == str(stored.resolve())
    assert stored.stat().st_ino == sif.stat().st_ino, "the store copy is a hard link, not a copy"
    assert entry.sha256 == store.sha256_file(sif)
    assert entry.def_sha256 == store.sha256_file(def_file)
    assert entry.lock_sha256 == store.sha256_file(lock_file)
    assert entry.size == sif.stat().st_size
    assert entry.git_commit == "c0ffee" and entry.inputs_sha256 == "ab" * 32
    index = json.loads((root / "index.json").read_text())
    assert index[0]["path"] == f"store/{entry.sha256}.sif", "store paths are kept relative to the images dir"
    assert store.current("cpu", root) == entry
    assert store.find(entry.sha256, root) == entry
    assert store.current("cuda12.8", root) is None
    assert store.find("0" * 64, root) is None
    assert not list(root.glob("*.tmp")) and not list(root.glob(".*.tmp"))


def test_index_survives_a_rebuild_and_keeps_the_old_image(built):
    tmp_path, sif, def_file, lock_file = built
    root = tmp_path / "images"
    first = store.record("cpu", sif, def_file, lock_file, root=root)
    # `make image` renames a new build over images/cpu.sif: a new inode, the store keeps the old one
    new = root / ".cpu.sif.tmp"
    new.write_bytes(b"a rebuilt image\n")
    new.replace(sif)
    second = store.record("cpu", sif, def_file, lock_file, root=root)
    assert second.sha256 != first.sha256
    assert [e.sha256 for e in store.records(root)] == [first.sha256, second.sha256]
    assert store.current("cpu", root) == second
    assert store.find(first.sha256, root) == first, "an exact rerun still finds the older image"
    assert store.sha256_file(first.path) == first.sha256
    # the store file of the newest build gone: current() falls back to the newest that still exists
    os.unlink(second.path)
    assert store.current("cpu", root) == first
    assert store.find(second.sha256, root) is None


def test_index_moves_with_the_images_directory(built):
    tmp_path, sif, def_file, lock_file = built
    entry = store.record("cpu", sif, def_file, lock_file, root=tmp_path / "images")
    moved = tmp_path / "elsewhere"
    (tmp_path / "images").rename(moved)
    again = store.current("cpu", moved)
    assert again is not None and again.sha256 == entry.sha256
    assert Path(again.path) == (moved / "store" / f"{entry.sha256}.sif").resolve()


def test_reads_an_index_written_with_absolute_paths_and_fewer_fields(tmp_path):
    root = tmp_path / "images"
    (root / "store").mkdir(parents=True)
    stored = root / "store" / ("1" * 64 + ".sif")
    stored.write_bytes(b"x")
    (root / "index.json").write_text(json.dumps([{
        "flavor": "cpu", "path": str(stored), "sha256": "1" * 64, "def_sha256": "", "lock_sha256": "",
        "size": 1, "built_at": "2026-01-01T00:00:00+0000", "git_commit": None, "some_future_field": 1,
    }]))
    entry = store.current("cpu", root)
    assert entry is not None and entry.inputs_sha256 == "" and entry.path == str(stored)


def test_inputs_key_and_stamp(tmp_path):
    """The content key covers the def file, the lock, install.sh, pyproject.toml and the cluster_train package, but not
    the host side or the job templates (they never run inside the image)."""
    repo = tmp_path / "repo"
    for rel, text in {"containers/cpu.def": "def\n", "containers/cpu.lock": "lock\n", "containers/install.sh": "sh\n",
                      "pyproject.toml": "[project]\n", "cluster_train/__init__.py": "",
                      "cluster_train/image/fit.py": "x = 1\n",
                      "cluster_train/host/x.py": "x = 1\n",
                      "cluster_train/host/schedulers/templates/slurm.sh.j2": "#!/bin/bash\n",
                      "cluster_train/__pycache__/junk.pyc": "junk", "README.md": "not an input\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    files = content_key.input_files("containers/cpu.def", "containers/cpu.lock", repo)
    assert files == sorted(["containers/cpu.def", "containers/cpu.lock", "containers/install.sh", "pyproject.toml",
                            "cluster_train/__init__.py", "cluster_train/image/fit.py"])
    stamp = repo / "images" / "cpu.inputs"
    status, text = content_key.inputs_status(stamp, "containers/cpu.def", "containers/cpu.lock", repo)
    assert status == "stale"
    assert content_key.write_stamp(stamp, text) is True
    mtime = stamp.stat().st_mtime_ns
    assert content_key.write_stamp(stamp, text) is False, "unchanged: not rewritten"
    assert stamp.stat().st_mtime_ns == mtime, "unchanged: not rewritten"
    assert content_key.inputs_status(stamp, "containers/cpu.def", "containers/cpu.lock", repo)[0] == "fresh"
    os.utime(repo / "containers/cpu.lock")  # touched, same content: still fresh
    assert content_key.inputs_status(stamp, "containers/cpu.def", "containers/cpu.lock", repo)[0] == "fresh"
    (repo / "cluster_train/host/x.py").write_text("x = 2\n")  # the host side: no rebuild
    assert content_key.inputs_status(stamp, "containers/cpu.def", "containers/cpu.lock", repo)[0] == "fresh"
    for rel in ["containers/cpu.lock", "cluster_train/image/fit.py", "containers/install.sh"]:
        before = (repo / rel).read_text()
        (repo / rel).write_text(before + "# changed\n")
        assert content_key.inputs_status(stamp, "containers/cpu.def", "containers/cpu.lock", repo)[0] == "stale", rel
        (repo / rel).write_text(before)
    (repo / "cluster_train/new_module.py").write_text("")
    assert content_key.inputs_status(stamp, "containers/cpu.def", "containers/cpu.lock", repo)[0] == "stale"


def test_cli_record_writes_index_and_stamp(built):
    tmp_path, sif, def_file, lock_file = built
    root = tmp_path / "images"
    stamp = root / "cpu.inputs"
    done = subprocess.run(
        [sys.executable, "-m", "cluster_train.host.images.content_key", "record", "--flavor", "cpu", "--sif", str(sif),
         "--def", str(def_file), "--lock", str(lock_file), "--root", str(root), "--git-commit", "abc",
         "--stamp", str(stamp)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "recorded cpu image sha256:" in done.stdout
    entry = store.current("cpu", root)
    assert entry.git_commit == "abc"
    assert entry.inputs_sha256 == store.sha256_text(stamp.read_text())
