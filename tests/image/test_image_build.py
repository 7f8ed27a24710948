"""`make image` is content-addressed: nothing changed -> nothing runs; a changed input -> a rebuild.

Checked with `make -q` / `make -n` (and a fake apptainer) on a copy of the repository, so no test here waits for
a real 3-minute build; the first test checks the real, already built CPU image of this checkout (`make test`
builds it before pytest starts).
"""
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.image


def make(*args, cwd, env=None):
    return subprocess.run(["make", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_second_make_image_is_a_no_op(cpu_image):
    """The image this checkout built is up to date: `make image` would not call apptainer again."""
    assert (ROOT / "images" / "cpu.sif").is_file()
    question = make("-q", "image", cwd=ROOT)
    assert question.returncode == 0, "make -q image: the CPU image is not up to date with its inputs"
    dry = make("-n", "image", cwd=ROOT)
    assert dry.returncode == 0, dry.stderr
    assert "apptainer" not in dry.stdout, dry.stdout
    done = make("image", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "apptainer" not in done.stdout and "building" not in done.stdout, done.stdout


@pytest.fixture
def repo(tmp_path):
    """A copy of this checkout (tracked and untracked-not-ignored files) with a fake, freshly 'built' CPU image."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    copy = tmp_path / "repo"
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / rel)
    (copy / "images").mkdir()
    (copy / "images" / "cpu.sif").write_bytes(b"a fake image\n")
    recorded = subprocess.run(  # what `make image` does after a build: the store copy, the index, the stamp
        [sys.executable, "-m", "cluster_train.host.images.content_key", "record", "--flavor", "cpu",
         "--sif", "images/cpu.sif", "--def", "containers/cpu.def", "--lock", "containers/cpu.lock", "--root", "images",
         "--stamp", "images/cpu.inputs"], cwd=copy, capture_output=True)
    assert recorded.returncode == 0, recorded.stderr
    return copy


def is_fresh(repo, flavor="cpu") -> bool:
    question = make("-q", "image", f"FLAVOR={flavor}", cwd=repo)
    assert question.returncode in (0, 1), question.stderr
    dry = make("-n", "image", f"FLAVOR={flavor}", cwd=repo)
    assert dry.returncode == 0, dry.stderr
    assert ("apptainer build" not in dry.stdout) == (question.returncode == 0), dry.stdout
    return question.returncode == 0


def test_unchanged_inputs_build_nothing_and_changed_ones_rebuild(repo):
    assert is_fresh(repo)
    for rel in ["containers/cpu.lock", "containers/cpu.def", "containers/install.sh", "pyproject.toml",
                "cluster_train/image/cli.py"]:
        path = repo / rel
        before = path.read_bytes()
        os.utime(path)  # touched, same content: still nothing to do
        assert is_fresh(repo), f"touching {rel} rebuilt"
        path.write_bytes(before + b"\n# changed\n")
        assert not is_fresh(repo), f"a change to {rel} did not rebuild"
        dry = make("-n", "image", cwd=repo).stdout
        assert "containers/cpu.def" in dry and "MIRROR=" in dry and "GIT_COMMIT=" in dry
        path.write_bytes(before)
        assert is_fresh(repo), f"{rel} restored, still rebuilding"
    (repo / "cluster_train" / "brand_new.py").write_text("")
    assert not is_fresh(repo), "a new file in the cluster_train package did not rebuild"


def test_an_image_gone_from_the_store_is_rebuilt(repo):
    """The run-cluster side finds images in the store: with its copy gone, `make image` must build, not answer
    that there is nothing to do."""
    assert is_fresh(repo)
    for stored in (repo / "images" / "store").iterdir():
        stored.unlink()  # images/cpu.sif, its hard link, stays: only the store copy is gone
    assert not is_fresh(repo)


def test_other_flavors_build_from_their_own_definition(repo):
    assert not is_fresh(repo, "cuda12.8")  # never built
    dry = make("-n", "image", "FLAVOR=cuda12.8", cwd=repo).stdout
    assert "containers/cuda12.8.def" in dry and "images/cuda12.8.sif" in dry


def test_interrupted_build_leaves_no_half_image(repo, tmp_path):
    """A build that dies half-way leaves the previous image, the stamp and the index as they were."""
    fake = tmp_path / "apptainer"
    # `apptainer build [options] OUTPUT DEF`: write part of OUTPUT, then die
    fake.write_text('#!/bin/sh\neval out=\\${$(($# - 1))}\necho "half an image" > "$out"\nexit 1\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    (repo / "containers" / "cpu.lock").write_bytes((repo / "containers" / "cpu.lock").read_bytes() + b"# new\n")
    stamp_before = (repo / "images" / "cpu.inputs").read_text()
    index_before = (repo / "images" / "index.json").read_text()
    done = make("image", f"APPTAINER={fake}", cwd=repo)
    assert done.returncode != 0
    assert f"{fake} failed (exit status 1); the whole log: images/cpu.apptainer.log" in done.stderr, done.stderr
    assert (repo / "images" / "cpu.sif").read_bytes() == b"a fake image\n"
    assert (repo / "images" / "cpu.inputs").read_text() == stamp_before
    assert (repo / "images" / "index.json").read_text() == index_before
    assert not [p.name for p in (repo / "images").iterdir() if "tmp" in p.name]


def test_successful_build_is_renamed_into_place_recorded_and_then_fresh(repo, tmp_path):
    fake = tmp_path / "apptainer"
    fake.write_text('#!/bin/sh\neval out=\\${$(($# - 1))}\necho "a new image" > "$out"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    (repo / "containers" / "cpu.lock").write_bytes((repo / "containers" / "cpu.lock").read_bytes() + b"# new\n")
    done = make("image", f"APPTAINER={fake}", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo / "images" / "cpu.sif").read_bytes() == b"a new image\n"
    assert "recorded cpu image sha256:" in done.stdout
    assert "building images/cpu.sif: done" in done.stderr  # the build's status, piped: its last plain line
    assert is_fresh(repo)
    again = make("image", f"APPTAINER={fake}", cwd=repo)
    assert again.returncode == 0 and "recorded" not in again.stdout, again.stdout


def test_a_cuda_build_that_passed_keeps_its_key_for_ci_and_a_cpu_build_does_not(repo, tmp_path):
    """containers/FLAVOR.tested: what CI compares to build the CUDA image only when its inputs changed."""
    from cluster_train.host.images.content_key import untested_inputs

    fake = tmp_path / "apptainer"  # a build that passes (apptainer build fails with a failing %test)
    fake.write_text('#!/bin/sh\neval out=\\${$(($# - 1))}\necho "a new image" > "$out"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    lock = repo / "containers" / "cuda12.8.lock"
    lock.write_bytes(lock.read_bytes() + b"# new\n")
    untested = lambda: untested_inputs("cuda12.8", repo)  # noqa: E731
    assert "containers/cuda12.8.lock" in untested()
    done = make("image", "FLAVOR=cuda12.8", f"APPTAINER={fake}", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo / "containers" / "cuda12.8.tested").read_text() == (repo / "images" / "cuda12.8.inputs").read_text()
    assert untested() == []
    image_cli = repo / "cluster_train" / "image" / "cli.py"
    image_cli.write_text(image_cli.read_text() + "\n# changed\n")
    assert untested() == ["cluster_train/image/cli.py"]
    (repo / "containers" / "cpu.lock").write_bytes((repo / "containers" / "cpu.lock").read_bytes() + b"# new\n")
    assert make("image", f"APPTAINER={fake}", cwd=repo).returncode == 0
    assert not (repo / "containers" / "cpu.tested").exists()
