"""`bin/run-cluster images list|import|verify` and where the image store is: $CT_IMAGES, the settings' `images:`,
a cluster file's `images:` (a group's shared store), else images/ of the checkout. The SIFs are real, tiny ones
(`apptainer build` of a scratch image with cluster-train's labels, well under a second)."""
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, run_cluster

pytestmark = pytest.mark.skipif(shutil.which("apptainer") is None, reason="apptainer builds the test SIFs")
FLAVOR_LABELS = "    org.cluster-train.flavor cpu\n    org.cluster-train.git-commit c0ffee\n"


def build_sif(path: Path, labels: str = FLAVOR_LABELS, content: str = "one") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "payload").write_text(content)
    definition = path.with_suffix(".def")
    definition.write_text(f"Bootstrap: scratch\n\n%files\n    {path.parent / 'payload'} /payload\n\n%labels\n{labels}")
    subprocess.run(["apptainer", "build", "--force", str(path), str(definition)], check=True, capture_output=True)
    return path


def images_command(*args, env=None):
    return run_cluster("images", *args, env=env)


def store_files(store: Path) -> dict:
    return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("*")
            if p.is_file()} if store.exists() else {}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "store"))
    (tmp_path / "settings.yaml").write_text("{}\n")  # none of the user's own: $CT_SETTINGS must name a file
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    return tmp_path / "store"


def test_import_lists_and_verifies(store, tmp_path):
    sif = build_sif(tmp_path / "cpu.sif")
    done = images_command("import", sif)
    assert done.returncode == 0, done.stderr
    digest = json.loads((store / "index.json").read_text())[0]["sha256"]
    assert f"imported cpu image sha256:{digest}" in done.stdout
    listed = images_command("list").stdout.splitlines()
    assert len(listed) == 1 and listed[0].startswith(f"cpu       sha256:{digest}") and "commit c0ffee" in listed[0]
    assert images_command("verify").stdout == f"ok cpu sha256:{digest}\n"


def refused_leaving_the_store_as_it_was(store: Path, *args) -> str:
    before = store_files(store)
    done = images_command(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run-cluster: error: ") and "Traceback" not in done.stderr
    assert store_files(store) == before
    return lines[0]


def test_import_refuses_what_is_not_a_whole_cluster_train_sif(store, tmp_path):
    good = build_sif(tmp_path / "good.sif")
    images_command("import", good)
    truncated = tmp_path / "truncated.sif"
    truncated.write_bytes(good.read_bytes()[:-4096])
    assert "is truncated" in refused_leaving_the_store_as_it_was(store, "import", truncated)
    text = tmp_path / "notes.sif"
    text.write_text("not an image\n" * 20)
    assert "is not a SIF image" in refused_leaving_the_store_as_it_was(store, "import", text)
    foreign = build_sif(tmp_path / "foreign" / "other.sif", labels="    maintainer someone\n")
    assert "not one of cluster-train's images" in refused_leaving_the_store_as_it_was(store, "import", foreign)
    other = build_sif(tmp_path / "another" / "cpu.sif", content="two")
    message = refused_leaving_the_store_as_it_was(store, "import", other, "--expect-sha256", "ab" * 32)
    assert f"not the expected {'ab' * 32}" in message
    assert "does not exist" in refused_leaving_the_store_as_it_was(store, "import", tmp_path / "missing.sif")


def test_two_imports_at_once_leave_one_copy_and_one_record(store, tmp_path):
    sif = build_sif(tmp_path / "cpu.sif")
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: images_command("import", sif), range(2)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    assert sorted(r.stdout.split()[0] for r in results) == ["already", "imported"]
    assert len(json.loads((store / "index.json").read_text())) == 1
    assert len(list((store / "store").iterdir())) == 1


def test_verify_names_a_store_file_changed_in_place(store, tmp_path):
    images_command("import", build_sif(tmp_path / "cpu.sif"))
    stored = next((store / "store").iterdir())
    with stored.open("ab") as f:
        f.write(b"edited on the shared file system")
    done = images_command("verify")
    assert done.returncode == 2 and "changed since it was stored" in done.stderr


def test_the_store_comes_from_the_environment_the_settings_or_the_cluster_file(tmp_path, monkeypatch):
    """A group store in the cluster file; a user's own `images:` over it; $CT_IMAGES over both."""
    from cluster_train.host import project
    from cluster_train.host.images.locations import store_of

    monkeypatch.delenv("CT_IMAGES", raising=False)
    settings = tmp_path / "settings.yaml"
    settings.write_text("{}\n")
    monkeypatch.setenv("CT_SETTINGS", str(settings))
    cluster = tmp_path / "lab.yaml"
    cluster.write_text((ROOT / "clusters" / "ci-slurm.yaml").read_text().replace(
        "scheduler: slurm\n", f"scheduler: slurm\nimages: {tmp_path / 'group'}\n"))
    assert store_of(str(cluster)) == tmp_path / "group"
    settings.write_text(f"images: {tmp_path / 'mine'}\n")
    assert store_of(str(cluster)) == tmp_path / "mine"
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "env"))
    assert store_of(str(cluster)) == tmp_path / "env"
    monkeypatch.delenv("CT_IMAGES")
    settings.write_text("")
    assert store_of("ci-slurm") == project.ROOT / "images"


def test_a_run_from_one_clone_uses_the_image_another_clone_built_into_a_shared_store(tmp_path, monkeypatch):
    """The clone that builds records into the shared store (CT_IMAGES=... make image); another clone whose settings
    name that store finds the image there."""
    shared = tmp_path / "shared"
    sif = build_sif(tmp_path / "cpu.sif")
    recorded = subprocess.run([sys.executable, "-m", "cluster_train.host.images.content_key", "record", "--flavor",
                               "cpu",
                               "--sif", sif, "--def", ROOT / "containers" / "cpu.def",
                               "--lock", ROOT / "containers" / "cpu.lock", "--root", shared],
                              capture_output=True, text=True, cwd=ROOT)
    assert recorded.returncode == 0, recorded.stderr
    digest = json.loads((shared / "index.json").read_text())[0]["sha256"]
    (tmp_path / "settings.yaml").write_text(f"images: {shared}\n")
    env = {k: v for k, v in os.environ.items() if k != "CT_IMAGES"}
    env.update(CT_SETTINGS=str(tmp_path / "settings.yaml"), CT_RUNS_DIR=str(tmp_path / "runs"))
    done = run_cluster("local", "cpu_1proc", "demo", "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert f"image: {shared / 'store' / digest}.sif (cpu) sha256 {digest}" in done.stdout
