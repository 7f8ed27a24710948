"""Data sets as images (issue 28): packed reproducibly, trained on unchanged, pinned by digest in the manifest, bound
read-only, staged to each node's local disk on the real test Slurm cluster, refused when modified."""
import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, assert_same_tensors, job_logs, manifest, run_cluster, squashfs_stand_in, wait_for_slurm_job

from cluster_train.host.images.store import sha256_file

# seed 002's experiment at its smallest: a small CNN over 16-pixel clips, one worker-free process
UFC_SMALL = ["--set", "model.name=basic_cnn", "--set", "model.params={}", "--set", "data.num_workers=0",
             "--set", "trainer.max_epochs=1", "--set", "data.batch_size=4"]
# seed 003's planner at its smallest (experiments/navsim_planner.yaml's CPU recipe)
PLANNER_SMALL = ["--set", "model.params={dim: 16, heads: 2, encoder_layers: 1, decoder_layers: 1}",
                 "--set", "trainer.max_epochs=1", "--set", "trainer.precision=32", "--set", "data.num_workers=0",
                 "--set", "data.batch_size=8", "--set", "data.rank_mem_gb=1"]
TINY_DISK = Path("/run/ct-tiny-disk")  # clusters/ci-slurm.yaml's partition ci-tiny-disk: its local_dir
# packing runs mksquashfs (squashfs-tools, installed with Apptainer by make apptainer; make test-fast installs neither)
packs = pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="mksquashfs packs data images: make apptainer")


@pytest.fixture(scope="module")
def ufc(tmp_path_factory):
    """Seed 002's layout: a directory of extracted frames (and the clips), generated small."""
    from cluster_train.image.data.ufc10 import generate_ufc10

    return generate_ufc10(tmp_path_factory.mktemp("ufc") / "ufc10", train_per_class=2, val_per_class=1,
                          test_per_class=1, size=16)


@pytest.fixture(scope="module")
def planner(tmp_path_factory):
    """Seed 003's layout: cached feature files reached through symbolic links (relative, inside the set)."""
    from cluster_train.image.data.planner_scenes_format import generate_planner_scenes

    root = generate_planner_scenes(tmp_path_factory.mktemp("planner") / "navsim", train_samples=32, val_samples=16,
                                   vocab_size=64)
    for shard in sorted(root.glob("*/shard_*.npz")):
        cached = root / "cache" / shard.parent.name / shard.name
        cached.parent.mkdir(parents=True, exist_ok=True)
        shard.rename(cached)
        shard.symlink_to(os.path.relpath(cached, shard.parent))
    return root


@pytest.fixture
def env(tmp_path, request):
    """An image store of this test's own (holding the built CPU image's record where the test needs the image)
    whose data store starts empty, and an empty runs directory."""
    images = tmp_path / "images"
    images.mkdir()
    if "cpu_image" in request.fixturenames:
        record = request.getfixturevalue("cpu_image")
        (images / "index.json").write_text(json.dumps([dataclasses.asdict(record)]))
    (tmp_path / "runs").mkdir()
    return {**os.environ, "CT_IMAGES": str(images), "CT_RUNS_DIR": str(tmp_path / "runs")}


def pack(env, path, *args):
    return run_cluster("data", "pack", str(path), *args, env=env)


def digest_of(done) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.split("sha256:")[1].split()[0]


def data_index(env) -> list:
    index = Path(env["CT_IMAGES"]) / "data" / "index.json"
    return json.loads(index.read_text()) if index.is_file() else []


@packs
def test_packing_the_same_files_gives_the_same_digest_whatever_their_times_and_modes(ufc, env, tmp_path):
    packed = pack(env, ufc, "--name", "ufc10")
    first = digest_of(packed)
    size = packed.stdout.split(" (")[1].split(",")[0]  # "ufc10: sha256:... (12.3 MB, 40 files) stored at ..."
    progress = [line for line in packed.stderr.splitlines() if line.startswith("packing ufc10: ")]
    assert progress and progress[-1].startswith(f"packing ufc10: {size}"), progress  # what was written (and its rate,
    # where the pack lasted long enough to measure one)
    assert "\r" not in packed.stderr  # a pipe: plain lines (here, with a pack of seconds, the last)
    copy = shutil.copytree(ufc, tmp_path / "elsewhere" / "ufc10")
    for path in copy.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))  # other times, another directory, another name
    some_file = next(p for p in sorted(copy.rglob("*")) if p.is_file())
    some_file.chmod(0o600)  # private modes: normalised, as the times are (the job's user reads every file)
    some_file.parent.chmod(0o700)
    assert digest_of(pack(env, copy, "--name", "ufc10-copy")) == first
    again = pack(env, ufc, "--name", "ufc10")
    assert digest_of(again) == first and "already stored" in again.stdout
    listed = run_cluster("data", "list", env=env).stdout
    assert listed.count(first) == 2 and "ufc10-copy" in listed
    assert run_cluster("data", "verify", "ufc10", env=env).stdout.strip() == f"ok ufc10 sha256:{first}"


@packs
def test_a_truncated_data_image_is_refused_on_import_and_named_by_verify(ufc, env, tmp_path):
    """A copy that stopped part way has a digest of its own: only the image's structure shows it is not whole."""
    digest_of(pack(env, ufc, "--name", "ufc10"))
    stored = Path(env["CT_IMAGES"]) / "data" / data_index(env)[0]["path"]
    cut = tmp_path / "cut.sqsh"
    cut.write_bytes(stored.read_bytes()[:stored.stat().st_size // 2])
    assert subprocess.run(["unsquashfs", "-lls", str(cut)], capture_output=True).returncode != 0  # its own verdict
    before = data_index(env)
    refused = run_cluster("data", "import", str(cut), "--name", "cut", env=env)
    assert refused.returncode == 2 and "cut.sqsh' is a damaged SquashFS image (truncated:" in refused.stderr
    assert data_index(env) == before
    with open(stored, "r+b") as f:  # a store copy cut after it was recorded (as an import used to record one)
        f.truncate(stored.stat().st_size // 2)
    recorded_cut = {**before[0], "sha256": sha256_file(stored)}
    (Path(env["CT_IMAGES"]) / "data" / "index.json").write_text(json.dumps([recorded_cut]))
    verified = run_cluster("data", "verify", env=env)
    assert verified.returncode == 2 and "is damaged (truncated:" in verified.stderr and "ok " not in verified.stdout
    submitted = run_cluster("ci-slurm", "n1_gpu1", "action_recognition", "--set", "data.image=ufc10",
                            "--set", "data.num_workers=0", "--dry-run",
                            env=env)  # refused before queueing, not when the job starts
    assert submitted.returncode == 2 and "(ufc10) is damaged (truncated:" in submitted.stderr, submitted.stderr


@packs
def test_bad_data_inputs_are_refused_in_one_line_and_nothing_is_written(ufc, env, tmp_path):
    digest_of(pack(env, ufc, "--name", "ufc10"))
    before = data_index(env)
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").write_text("other bytes\n")
    (tmp_path / "not.sqsh").write_text("not squashfs\n")
    cases = {
        ("data", "pack", str(tmp_path / "missing")): "does not exist",
        ("data", "pack", str(tmp_path / "empty")): "holds no files",
        ("data", "pack", str(other), "--name", "ufc10"): "already names sha256:",
        ("data", "import", str(tmp_path / "not.sqsh")): "is not a SquashFS file",
        ("ci-slurm", "n1_gpu1", "action_recognition", "--set", "data.image=sha256:" + "0" * 64, "--dry-run"):
            "no data image 'sha256:0000",
    }
    for args, words in cases.items():
        done = run_cluster(*args, env=env)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and words in lines[-1] and lines[-1].startswith("run-cluster: error:"), args
        assert [line for line in lines if line.startswith("run-cluster")] == lines[-1:], done.stderr
    assert data_index(env) == before
    assert not list((Path(env["CT_IMAGES"]) / "data" / "store").glob(".*"))  # no half-packed file left
    assert not list(Path(env["CT_RUNS_DIR"]).iterdir())
    link = other / "escape"
    link.symlink_to(ufc)
    done = pack(env, other, "--name", "other")
    assert done.returncode == 2 and "leads outside" in done.stderr


@pytest.mark.image
def test_a_run_on_the_packed_image_trains_as_on_the_directory_and_pins_its_digest(cpu_image, ufc, env):
    digest = digest_of(pack(env, ufc, "--name", "ufc10"))
    runs = Path(env["CT_RUNS_DIR"])
    for run_id, data in (("on-dir", [f"data.root={ufc}"]), ("on-image", ["data.root=/data/ufc10", "data.image=ufc10"])):
        done = run_cluster("local", "cpu_1proc", "action_recognition", *UFC_SMALL, "--run-id", run_id,
                           *[a for d in data for a in ("--set", d)], env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    on_dir, on_image = runs / "on-dir", runs / "on-image"
    assert_same_tensors(on_dir / "checkpoints" / "last.ckpt", on_image / "checkpoints" / "last.ckpt")
    results = [json.loads((run / "results.json").read_text()) for run in (on_dir, on_image)]
    assert results[0]["final_val_loss"] == results[1]["final_val_loss"]
    assert [r["input"]["data_from"] for r in results] == ["directory", "image"]
    recorded = manifest(on_image)["data"]
    assert recorded["sha256"] == digest and recorded["name"] == "ufc10" and manifest(on_dir)["data"] is None
    status = run_cluster("status", on_image, env=env).stdout
    assert f"data: image ufc10 sha256:{digest}" in status and "shared data image" in status
    compared = run_cluster("compare", on_dir, on_image, env=env).stdout
    assert f"ufc10 sha256:{digest[:12]}" in compared and "directory /" in compared
    assert run_cluster("report", on_image, env=env).returncode == 0
    assert f"ufc10 sha256:{digest}" in (on_image / "report.html").read_text()
    probed = run_cluster("probe-data", "action_recognition", "--set", "data.image=ufc10", "--set",
                         "data.root=/data/ufc10", "--set", "data.num_workers=1", "--batches", "2", env=env)
    assert probed.returncode == 0 and "GB per worker" in probed.stdout, probed.stderr
    # a rerun reads the recorded bytes or nothing: with the image gone from the store it is refused
    stored = Path(recorded["path"])
    stored.rename(stored.with_suffix(".away"))
    refused = run_cluster("--rerun", on_image, "--dry-run", env=env)
    assert refused.returncode == 2 and f"sha256:{digest} this run read is not in" in refused.stderr
    stored.with_suffix(".away").rename(stored)
    rerun = run_cluster("--rerun", on_image, "--dry-run", env=env)
    assert rerun.returncode == 0 and f"CT_DATA_SHA256={digest}" in rerun.stdout, rerun.stderr


@pytest.fixture
def tiny_disk():
    """A node-local disk of 4 KiB: no data image fits."""
    TINY_DISK.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "ct-tiny-disk", str(TINY_DISK)], check=True)
    yield TINY_DISK
    subprocess.run(["umount", str(TINY_DISK)], check=True)


@pytest.mark.image
@pytest.mark.slurm
def test_jobs_stage_the_data_image_fall_back_and_refuse_a_modified_one(cpu_image, slurm_cluster, ufc, planner,
                                                                      env, tiny_disk, tmp_path):
    """On the test Slurm cluster: a 2-node job stages, a too-small local disk falls back, a modified image is
    refused at job start; on the LSF stand-in, a 2-host job stages through blaunch (all at once)."""
    digest = digest_of(pack(env, ufc, "--name", "ufc10"))
    digest_of(pack(env, planner, "--name", "navsim"))
    digest_of(pack(env, planner / "cache", "--name", "tampered"))
    tampered = Path(env["CT_IMAGES"]) / "data" / next(e["path"] for e in data_index(env) if e["name"] == "tampered")
    with open(tampered, "r+b") as f:  # a byte past the SquashFS header: it still looks like one at submission
        f.seek(200)
        f.write(bytes([f.read(1)[0] ^ 0xFF]))
    jobs = {
        "staged": ("n2_staged", "action_recognition", "/data/ufc10", "ufc10", UFC_SMALL),
        "tiny-disk": ("n1_staged_tiny_disk", "navsim_planner", "/data/navsim", "navsim", PLANNER_SMALL),
        "tampered": ("n1_gpu1", "navsim_planner", "/data/navsim", "tampered", PLANNER_SMALL),
    }
    for run_id, (profile, experiment, root, image, small) in jobs.items():
        done = run_cluster("ci-slurm", profile, experiment, *small, "--set", f"data.root={root}", "--set",
                           f"data.image={image}", "--run-id", run_id, "--no-wait", env=env)
        assert done.returncode == 0, done.stderr
    lsf = {**env, "PATH": f"{ROOT / 'tests' / 'lsf'}:{env['PATH']}", "CT_LSF_STATE": str(tmp_path / "lsf")}
    on_lsf = run_cluster("ci-lsf", "two_hosts_staged", "action_recognition", *UFC_SMALL, "--set",
                         "data.root=/data/ufc10", "--set", "data.image=ufc10", "--run-id", "lsf-staged", "--wait",
                         "--timeout", "600", env=lsf)
    runs = Path(env["CT_RUNS_DIR"])
    log = job_logs(runs / "lsf-staged")
    assert on_lsf.returncode == 0, on_lsf.stdout[-3000:] + on_lsf.stderr + log[-3000:]
    assert len(re.findall(r"\] (n\d): data image staged to", log)) == 2, log[-3000:]
    states = {run_id: wait_for_slurm_job(manifest(runs / run_id)["scheduler"]["job_id"]) for run_id in jobs}
    logs = {run_id: job_logs(runs / run_id) for run_id in jobs}
    assert states["staged"] == "COMPLETED", logs["staged"][-4000:]
    staged = [line for line in logs["staged"].splitlines() if "data image staged to" in line]
    assert {line.split()[1].rstrip(":") for line in staged} == {"n1", "n2"}, logs["staged"][-3000:]
    assert json.loads((runs / "staged" / "results.json").read_text())["input"]["data_from"] == "staged"
    assert json.loads((runs / "lsf-staged" / "results.json").read_text())["input"]["data_from"] == "staged"
    assert not list(Path("/tmp/ct-node-local").glob("*/cluster-train-*")), "a staged copy was left behind"
    assert states["tiny-disk"] == "COMPLETED", logs["tiny-disk"][-4000:]
    assert "the data image was not staged" in logs["tiny-disk"] and "reading the shared copy" in logs["tiny-disk"]
    assert json.loads((runs / "tiny-disk" / "results.json").read_text())["input"]["data_from"] == "image"
    assert states["tampered"] == "FAILED", logs["tampered"][-3000:]
    assert "it was modified" in logs["tampered"] and not (runs / "tampered" / "results.json").exists()
    status = run_cluster("status", runs / "tampered", env=env).stdout  # the cause where status and runs show it
    assert re.search(r"cause: the data image \S+ on n\d is not the one run .* it was modified; restore", status), status
    listed = run_cluster("runs", "--here", "--state", "FAILED", env=env).stdout
    assert "it was modified" in next(line for line in listed.splitlines() if " tampered " in line), listed
    assert manifest(runs / "staged")["data"]["sha256"] == digest


@pytest.mark.registry
def test_a_data_image_travels_through_an_oci_registry_by_its_digest(ufc, env, tmp_path, oci_registry):
    digest = digest_of(pack(env, ufc, "--name", "ufc10"))
    reference = f"oras://{oci_registry}/lab/data:ufc10"
    pushed = run_cluster("data", "push", "ufc10", reference, "--plain-http", env=env)
    assert pushed.returncode == 0 and f":sha256-{digest}" in pushed.stdout, pushed.stderr
    elsewhere = {**env, "CT_IMAGES": str(tmp_path / "elsewhere")}
    exact = f"oras://{oci_registry}/lab/data:sha256-{digest}"
    wrong = run_cluster("data", "pull", exact, "--name", "ufc10", "--plain-http", "--expect-sha256", "0" * 64,
                        env=elsewhere)
    assert wrong.returncode == 2 and "not the expected" in wrong.stderr and data_index(elsewhere) == []
    pulled = run_cluster("data", "pull", exact, "--name", "ufc10", "--plain-http", "--expect-sha256", digest,
                         env=elsewhere)
    assert pulled.returncode == 0, pulled.stderr
    assert run_cluster("data", "verify", env=elsewhere).stdout.strip() == f"ok ufc10 sha256:{digest}"


def test_submission_checks_staging_against_the_partition(env, tmp_path):
    """No local disk named: refused; a data image larger than the stated local disk: refused where staging is
    required, else a warning and the shared copy (the index's size is what submission reads)."""
    root = Path(env["CT_IMAGES"]) / "data"
    (root / "store").mkdir(parents=True)
    squashfs_stand_in(root / "store" / "big.sqsh")  # the index below says how big the image is
    (root / "index.json").write_text(json.dumps([{"name": "big", "sha256": "a" * 64, "path": "store/big.sqsh",
                                                  "size": 5 * 10**9, "files": 1, "source": "/x", "packed_at": "-"}]))
    node = "{partition: ci, image: cpu, gpu_type: fake, gpus_per_node: 1, cpus_per_node: 4, mem_per_node_gb: 15"
    shape = "nodes: 1, gpus_per_node: 1, mem_gb: 4, trainer: {accelerator: cpu, strategy: single}"
    (tmp_path / "site.yaml").write_text(f"""name: site
scheduler: slurm
apptainer: {{nv: false}}
partitions:
  nodisk: {node}}}
  small: {node}, local_dir: $TMPDIR, local_disk_gb: 1}}
profiles:
  nodisk: {{partition: nodisk, stage_data: true, {shape}}}
  required: {{partition: small, stage_required: true, {shape}}}
  wanted: {{partition: small, stage_data: true, {shape}}}
""")
    said = {}
    for profile in ("nodisk", "required", "wanted"):
        said[profile] = run_cluster(str(tmp_path / "site.yaml"), profile, "demo", "--set", "data.image=big",
                                    "--set", "data.num_workers=0", "--dry-run", env=env)
    assert said["nodisk"].returncode == 2 and "names no local_dir" in said["nodisk"].stderr
    assert said["required"].returncode == 2 and "requires staging" in said["required"].stderr
    wanted = said["wanted"]
    assert wanted.returncode == 0 and "does not fit partition 'small'" in wanted.stderr, wanted.stderr
    assert "ct_stage_node" not in wanted.stdout and "ct_data_ok \"$CT_DATA_IMAGE\"" in wanted.stdout
