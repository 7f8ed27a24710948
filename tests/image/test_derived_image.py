"""`bin/run-cluster images derive`: a project's hash-locked packages on top of a stored image, recorded with its
parent's digest.

The checks (an unhashed lock, a missing or modified parent, the rendered definition, the index's new field, a rerun
whose parent is gone) run on stand-in files with a fake apptainer that must never be called. The build test derives
a real image from the real CPU image of this checkout, adding a wheel written here (no network: --wheels)."""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import conftest
import pytest
from conftest import ROOT

from cluster_train.shared.errors import UserError
from cluster_train.host.images import derive, store
from cluster_train.host.images.locations import run_image
from cluster_train.host.runs.manifest import Manifest

PROBE = "ctprobe"  # the tiny package the derived image adds


def run_cluster(*args, env=None):
    return conftest.run_cluster(*args, env={**os.environ, **(env or {})})


def write_wheel(directory: Path, name: str = PROBE, version: str = "0.1") -> Path:
    """A minimal pure-Python wheel, written by hand: a module, METADATA, WHEEL and a RECORD of their hashes."""
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{name}-{version}.dist-info/METADATA": "Metadata-Version: 2.1\nName: "
                                                     f"{name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                                  b"Tag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items())
    files[f"{name}-{version}.dist-info/RECORD"] = (record + f"{name}-{version}.dist-info/RECORD,,\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)
    return wheel


def hash_lock(path: Path, wheel: Path, name: str = PROBE, version: str = "0.1") -> Path:
    """What `uv pip compile --generate-hashes` writes for the one package."""
    path.write_text(f"# uv pip compile --generate-hashes requirements.in -o {path.name}\n{name}=={version} \\\n"
                    f"    --hash=sha256:{store.sha256_file(wheel)}\n    # via -r requirements.in\n")
    return path


@pytest.fixture
def fake_store(tmp_path, monkeypatch):
    """A stand-in CPU image in a store of its own, settings and runs of their own, and an apptainer that records
    being called (nothing here may reach a build)."""
    root = tmp_path / "images"
    sif = tmp_path / "cpu.sif"
    sif.write_text("stand-in cpu image\n")
    parent = store.record("cpu", sif, ROOT / "pyproject.toml", ROOT / "pyproject.toml", root=root)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text(f"#!/bin/sh\necho called >> {tmp_path / 'apptainer-called'}\nexit 1\n")
    (bin_dir / "apptainer").chmod(0o755)
    (tmp_path / "settings.yaml").write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CT_IMAGES", str(root))
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    return root, parent


def store_files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()
            and p.name != ".index.lock"}


def refused(root: Path, *args) -> str:
    """The command's one error line; the store as it was and no apptainer started."""
    before = store_files(root)
    done = run_cluster("images", "derive", *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith("run-cluster: error: ") and "Traceback" not in done.stderr
    assert store_files(root) == before
    assert not (root.parent / "apptainer-called").exists(), "apptainer ran before the input was checked"
    return lines[0]


def test_an_unhashed_requirement_is_refused_with_one_line_before_any_build(fake_store, tmp_path):
    root, _ = fake_store
    wheel = write_wheel(tmp_path / "wheels")
    lock = hash_lock(tmp_path / "requirements.lock", wheel)
    lock.write_text(lock.read_text() + "tqdm==4.67.1\n")
    line = refused(root, "myproject", "--from", "cpu", "--requirements", lock, "--wheels", wheel.parent)
    assert f"{lock} line 5: 'tqdm==4.67.1' has no --hash" in line, line
    assert "uv pip compile --generate-hashes" in line and "pip-compile --generate-hashes" in line


@pytest.mark.parametrize("text, problem", [
    ("numpy>=1.26 \\\n    --hash=sha256:" + "a" * 64 + "\n", "line 1: 'numpy>=1.26 --hash=sha256:aaa"),
    ("# pinned\n\nfire==0.7.1 --hash=sha256:" + "b" * 64 + " --hash=md5:abc\n", "line 3: 'fire==0.7.1"),
    ("fire==0.7.1 --hash=sha256:" + "b" * 63 + "\n", "has no --hash"),
    ("-e ./myproject\n", "uses -e"),
    ("--index-url https://mirror.example/simple\ntqdm==4.67.1 --hash=sha256:" + "a" * 64 + "\n",
     "uses --index-url with an index other than PyPI"),
    ("--extra-index-url https://download.pytorch.org/whl/cu116\n", "uses --extra-index-url with an index other"),
    ("-r other.txt\n", "uses -r"),
    ("# nothing but comments\n", "lists no packages"),
])
def test_the_lock_must_pin_every_package_to_a_version_and_hash(tmp_path, text, problem):
    lock = tmp_path / "requirements.lock"
    lock.write_text(text)
    with pytest.raises(UserError) as refused_:
        derive.check_lock(lock)
    assert problem in str(refused_.value) and "\n" not in str(refused_.value)


def test_a_hash_locked_file_as_the_lock_tools_write_it_passes(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("--index-url https://pypi.org/simple\n"
                    "Fire[extra]==0.7.1 ; python_version >= '3.8' \\\n    --hash=sha256:" + "a" * 64 + " \\\n"
                    "    --hash=sha256:" + "b" * 64 + "\n    # via -r requirements.in\n"
                    "tqdm==4.67.1 --hash=sha512:" + "c" * 128 + "  # a comment\n")
    assert derive.check_lock(lock) == ["Fire[extra]==0.7.1", "tqdm==4.67.1"]
    assert derive.check_lock(ROOT / "containers" / "cpu.lock"), "the base images' own locks pass"


def test_a_missing_or_modified_parent_is_refused(fake_store, tmp_path):
    root, parent = fake_store
    lock = hash_lock(tmp_path / "requirements.lock", write_wheel(tmp_path / "wheels"))
    gone = "d" * 64
    line = refused(root, "myproject", "--from", gone, "--requirements", lock)
    assert f"no image sha256:{gone} in the image store {root} to derive from" in line
    assert f"images import FILE.sif --expect-sha256 {gone}" in line

    def refused_here(name: str, base: str) -> str:  # the same checks, in this process (each CLI start costs ~1 s)
        before = store_files(root)
        with pytest.raises(UserError) as error:
            derive.derive(name, base, lock, None, root)
        assert store_files(root) == before and not (tmp_path / "apptainer-called").exists()
        return str(error.value)

    assert "no cuda12.8 image in the image store" in refused_here("p", "cuda12.8")
    with open(parent.path, "a") as f:
        f.write("modified in place\n")
    assert "was tampered with: its sha256 is no longer" in refused_here("myproject", parent.sha256)
    assert "must be 1-40 of a-z" in refused_here("My Project", "cpu")


def test_the_definition_builds_on_the_parent_by_digest(fake_store, tmp_path):
    root, parent = fake_store
    wheels = write_wheel(tmp_path / "wheels").parent
    lock = hash_lock(tmp_path / "requirements.lock", next(wheels.iterdir()))
    before = store_files(root)
    done = run_cluster("images", "derive", "myproject", "--from", "cpu", "--requirements", lock, "--wheels", wheels,
                       "--dry-run")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Bootstrap: localimage\n" in text and f"From: {root}/store/{parent.sha256}.sif\n" in text
    assert "pip install -q --require-hashes --no-deps --no-index --find-links /opt/cluster-train/derived/myproject" \
           "/wheels -r /opt/cluster-train/derived/myproject/requirements.lock" in text
    assert "org.cluster-train.flavor cpu+myproject\n" in text
    assert f"org.cluster-train.parent-sha256 {parent.sha256}\n" in text
    assert f"org.cluster-train.lock-sha256 {store.sha256_file(lock)}\n" in text
    assert "{{" not in text and "{%" not in text
    assert store_files(root) == before


def test_the_index_reads_records_without_a_parent_and_keeps_the_field(fake_store, tmp_path):
    """index.json written before derived images (no parent_sha256) still reads; a derived record keeps its parent."""
    root, parent = fake_store
    items = json.loads((root / "index.json").read_text())
    del items[0]["parent_sha256"]
    (root / "index.json").write_text(json.dumps(items))
    assert store.records(root)[0].parent_sha256 == ""
    child = tmp_path / "child.sif"
    child.write_text("stand-in derived image\n")
    entry, _ = store.add("cpu+myproject", child, store.sha256_file(child), root, None, parent_sha256=parent.sha256)
    assert json.loads((root / "index.json").read_text())[-1]["parent_sha256"] == parent.sha256
    assert store.current("cpu", root).sha256 == parent.sha256, "a derived image is never the base flavor's image"
    assert store.current("cpu+myproject", root) == entry
    assert store.base_flavor("cpu+myproject") == "cpu" and store.base_flavor("cuda12.8") == "cuda12.8"


def test_a_rerun_of_a_derived_image_needs_its_parent(fake_store, tmp_path):
    root, parent = fake_store
    child = tmp_path / "child.sif"
    child.write_text("stand-in derived image\n")
    entry, _ = store.add("cpu+myproject", child, store.sha256_file(child), root, None, parent_sha256=parent.sha256)
    manifest = Manifest({"cluster_file": "local", "image": {"sha256": entry.sha256, "flavor": "cpu+myproject"}})
    assert run_image(manifest, "the image of runs/x") == entry
    Path(parent.path).unlink()
    with pytest.raises(UserError) as gone:
        run_image(manifest, "the image of runs/x")
    assert f"the parent image of the image of runs/x (cpu+myproject was built on it) (sha256 {parent.sha256}) is " \
           f"not in the image store" in str(gone.value)


def test_a_run_on_a_derived_image_takes_its_bases_checks_and_records_both_digests(fake_store, tmp_path, monkeypatch):
    root, parent = fake_store
    child = tmp_path / "child.sif"
    child.write_text("stand-in derived image\n")
    entry, _ = store.add("cpu+myproject", child, store.sha256_file(child), root, None, parent_sha256=parent.sha256)
    done = run_cluster("local", "cpu_1proc", "demo", "--flavor", "cpu+myproject", "--dry-run",
                       env={"CT_RUNS_DIR": str(tmp_path / "runs")})
    assert done.returncode == 0, done.stderr
    assert f"image: {entry.path} (cpu+myproject) sha256 {entry.sha256}" in done.stdout
    from cluster_train.host.jobs.build import Request, Site, build  # the manifest's image entry, as queue() writes it

    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))
    job = build(Site.load("local"), Request("cpu_1proc", "demo", flavor="cpu+myproject", dry_run=True)).job
    assert job.image.parent_sha256 == parent.sha256
    missing = run_cluster("local", "cpu_1proc", "demo", "--flavor", "cpu+other")
    assert "build it with: bin/run-cluster images derive other --from cpu" in missing.stderr


@pytest.mark.skipif(shutil.which("apptainer") is None, reason="apptainer builds the test SIF")
def test_an_imported_derived_image_knows_its_parent_from_its_labels(fake_store, tmp_path, monkeypatch):
    """A derived SIF copied to another machine enters that store with its parent's digest (its labels carry it)."""
    root, parent = fake_store
    monkeypatch.setenv("PATH", os.environ["PATH"].replace(f"{tmp_path / 'bin'}:", "", 1))  # the real apptainer
    (tmp_path / "payload").write_text("derived\n")
    (tmp_path / "derived.def").write_text(
        f"Bootstrap: scratch\n\n%files\n    {tmp_path / 'payload'} /payload\n\n%labels\n"
        f"    org.cluster-train.flavor cpu+myproject\n    org.cluster-train.parent-sha256 {parent.sha256}\n")
    subprocess.run(["apptainer", "build", "--force", str(tmp_path / "derived.sif"), str(tmp_path / "derived.def")],
                   check=True, capture_output=True)
    done = run_cluster("images", "import", tmp_path / "derived.sif")
    assert done.returncode == 0, done.stderr
    entry = store.current("cpu+myproject", root)
    assert entry.parent_sha256 == parent.sha256
    assert f"parent sha256:{parent.sha256}" in run_cluster("images", "list").stdout


@pytest.mark.image
def test_derive_builds_on_the_real_cpu_image_and_records_its_parent(cpu_image, demo_data, tmp_path, monkeypatch):
    """A real derived image: the wheel imports inside it, the base's code still runs, the index and the labels
    name the parent; the same inputs build nothing again; a run trains on it (--flavor cpu+myproject) and records
    its digest and its parent's; a rerun needs the parent."""
    root = tmp_path / "images"
    base = store.record("cpu", cpu_image.path, ROOT / "containers" / "cpu.def", ROOT / "containers" / "cpu.lock",
                        root=root, git_commit=cpu_image.git_commit)  # a hard link of the real store file
    (tmp_path / "settings.yaml").write_text("")
    env = {"CT_IMAGES": str(root), "CT_SETTINGS": str(tmp_path / "settings.yaml")}
    wheels = write_wheel(tmp_path / "wheels").parent
    lock = hash_lock(tmp_path / "requirements.lock", next(wheels.iterdir()))
    args = ("images", "derive", "myproject", "--from", "cpu", "--requirements", lock, "--wheels", wheels)
    start = time.monotonic()
    done = run_cluster(*args, env=env)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"derived image built and recorded in {took:.0f} s")
    derived = store.current("cpu+myproject", root)
    assert derived.parent_sha256 == base.sha256 == cpu_image.sha256
    assert derived.lock_sha256 == store.sha256_file(lock) and derived.git_commit == cpu_image.git_commit
    assert f"built cpu+myproject image sha256:{derived.sha256}" in done.stdout
    assert store.sha256_file(root / "cpu+myproject.sif") == derived.sha256
    assert "From: " + base.path in (root / "cpu+myproject.def").read_text()
    assert not [p.name for p in (root / "store").iterdir() if p.name.startswith(".")], "build debris in the store"

    ran = subprocess.run(["apptainer", "exec", "--cleanenv", derived.path, "python", "-c",
                          f"import {PROBE}, train; print({PROBE}.VALUE)"], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "42", ran.stderr
    labels = json.loads(subprocess.run(["apptainer", "inspect", "--labels", "--json", derived.path],
                                       capture_output=True, text=True,
                                       check=True).stdout)["data"]["attributes"]["labels"]
    assert labels["org.cluster-train.flavor"] == "cpu+myproject"
    assert labels["org.cluster-train.parent-sha256"] == base.sha256
    # its module list again, with the added package: the host checks a command's imports against it (issue 56)
    assert {PROBE, "lightning", "pytorch_lightning"} <= set(labels["org.cluster-train.modules"].split())
    listed = run_cluster("images", "list", env=env).stdout
    assert f"cpu+myproject sha256:{derived.sha256}" in listed and f"parent sha256:{base.sha256}" in listed

    again = run_cluster(*args, env=env)
    assert again.returncode == 0 and f"up to date: cpu+myproject image sha256:{derived.sha256}" in again.stdout
    assert len(store.records(root)) == 2

    tiny = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
            "data.num_workers=0", f"data.root={demo_data}"]
    trained = run_cluster("local", "cpu_1proc", "demo", "--flavor", "cpu+myproject", "--run-id", "derived",
                          *[a for kv in tiny for a in ("--set", kv)],
                          env={**env, "CT_RUNS_DIR": str(tmp_path / "runs")})
    run_dir = tmp_path / "runs" / "derived"
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    ran = json.loads((run_dir / "manifest.json").read_text())["image"]
    assert (ran["flavor"], ran["sha256"], ran["parent_sha256"]) == ("cpu+myproject", derived.sha256, base.sha256)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["image_sha256"] == derived.sha256 and results["epochs"] == 1  # the job saw its digest inside

    manifest = Manifest({"cluster_file": "local", "image": {"sha256": derived.sha256, "flavor": derived.flavor}})
    monkeypatch.setenv("CT_IMAGES", str(root))
    (tmp_path / "settings.yaml").touch()  # $CT_SETTINGS must name a file
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    assert run_image(manifest, "the image of runs/x").sha256 == derived.sha256
    Path(base.path).unlink()  # the test store's link only; the checkout's store keeps its file
    with pytest.raises(UserError, match="the parent image of the image of runs/x"):
        run_image(manifest, "the image of runs/x")


def test_make_lock_derived_resolves_against_the_image_and_leaves_its_packages_out(tmp_path):
    """`make lock-derived` (network: not run here) compiles with
    the flavor's own options and its lock as constraints."""
    reqs = tmp_path / "requirements.in"
    reqs.write_text("timm\n")
    dry = subprocess.run(["make", "-n", "lock-derived", f"REQS={reqs}"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert "--generate-hashes" in dry.stdout and "-c containers/cpu.lock" in dry.stdout
    assert "--excludes containers/requirements/cpu.excludes.txt" in dry.stdout  # PyPI torch's CUDA wheels
    assert "--no-emit-package" in dry.stdout and f'"{reqs}" -o "{tmp_path / "requirements.lock"}"' in dry.stdout
    missing = subprocess.run(["make", "-s", "lock-derived", "REQS=nope.in"], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode == 2 and "give REQS=path/requirements.in" in missing.stderr
