"""Images through a real OCI registry (Debian's docker-registry on 127.0.0.1, plain HTTP): `images push` and `images
pull` by Apptainer's ORAS support, the digest checked before a pulled file enters the store, and a rerun on a
machine whose store lacks the run's image pulling it by the reference its manifest recorded."""
import json
import os
import subprocess

import pytest
from conftest import ROOT, manifest, run_cluster, wait_for_slurm_job
from host.test_image_commands import build_sif, images_command, store_files

pytestmark = pytest.mark.registry


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "store"))
    (tmp_path / "settings.yaml").touch()  # $CT_SETTINGS must name a file
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    return tmp_path / "store"


def test_push_then_pull_by_digest_into_an_empty_store(oci_registry, store, tmp_path):
    images_command("import", build_sif(tmp_path / "cpu.sif"))
    digest = json.loads((store / "index.json").read_text())[0]["sha256"]
    done = images_command("push", "cpu", f"oras://{oci_registry}/lab/cluster-train:latest", "--plain-http")
    assert done.returncode == 0, done.stderr
    by_digest = f"oras://{oci_registry}/lab/cluster-train:sha256-{digest}"
    assert by_digest in done.stdout and ":latest" in done.stdout
    short = f"oras://{oci_registry}/lab/cluster-train:sha256-{digest[:12]}"  # a status line names digests short
    assert f"pushing {digest[:12]}.sif to {short}: " in done.stderr  # its progress (its final line, piped)
    assert json.loads((store / "index.json").read_text())[0]["pushed"] == [{"reference": by_digest, "plain_http": True}]
    elsewhere = tmp_path / "elsewhere"  # another machine's store
    pulled = run_cluster("images", "pull", by_digest, "--plain-http", "--expect-sha256", digest,
                         env={**os.environ, "CT_IMAGES": str(elsewhere)})
    assert pulled.returncode == 0, pulled.stderr
    assert f"pulled cpu image sha256:{digest}" in pulled.stdout
    assert f"pulling {short}: 0.0 MB" in pulled.stderr  # its progress: the bytes that arrived (a tiny image)
    assert (elsewhere / "store" / f"{digest}.sif").read_bytes() == (store / "store" / f"{digest}.sif").read_bytes()
    assert [p.name for p in (elsewhere / "store").iterdir()] == [f"{digest}.sif"]  # no temporary file left


def test_a_pulled_image_that_is_not_the_expected_one_never_enters_the_store(oci_registry, store, tmp_path):
    images_command("import", build_sif(tmp_path / "a" / "cpu.sif", content="a"))
    images_command("push", "cpu", f"oras://{oci_registry}/lab/other:v1", "--plain-http")
    (store / "index.json").unlink()
    for stored in (store / "store").iterdir():
        stored.unlink()
    before = store_files(store)
    done = images_command("pull", f"oras://{oci_registry}/lab/other:v1", "--plain-http", "--expect-sha256", "ab" * 32)
    assert done.returncode == 2 and f"not the expected {'ab' * 32}" in done.stderr, done.stderr
    assert store_files(store) == before
    missing = images_command("pull", f"oras://{oci_registry}/lab/other:nope", "--plain-http")
    assert missing.returncode == 2 and "manifest unknown" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


@pytest.mark.image
@pytest.mark.slurm
def test_a_rerun_pulls_its_image_by_digest_and_trains(oci_registry, cpu_image, slurm_cluster, demo_data, runs_dir,
                                                      store, tmp_path):
    from cluster_train.host.images import store as image_store

    image_store.record("cpu", cpu_image.path, ROOT / "containers" / "cpu.def", ROOT / "containers" / "cpu.lock",
                       root=store)  # a hard link: this machine's store, with the image built here
    pushed = images_command("push", "cpu", f"oras://{oci_registry}/lab/cluster-train", "--plain-http")
    assert pushed.returncode == 0, pushed.stderr
    small = ["--set", f"data.root={demo_data}", "--set", "trainer.max_epochs=1", "--set", "data.num_workers=0",
             "--set", "trainer.limit_train_batches=4", "--set", "trainer.limit_val_batches=2"]
    first = run_cluster("ci-slurm", "n1_gpu1", "demo", *small, "--run-id", "first", "--no-wait")
    assert first.returncode == 0, first.stderr
    recorded = manifest(runs_dir / "first")["image"]
    assert recorded["registry"] == {"reference": f"oras://{oci_registry}/lab/cluster-train:sha256-{cpu_image.sha256}",
                                    "plain_http": True}
    subprocess.run(["scancel", manifest(runs_dir / "first")["scheduler"]["job_id"]], check=True)  # the rerun trains
    (store / "store" / f"{cpu_image.sha256}.sif").unlink()  # the store of a machine that never had the image
    rerun = run_cluster("--rerun", runs_dir / "first", "--run-id", "again", "--no-wait")
    assert rerun.returncode == 0, rerun.stderr
    assert "was not in" in rerun.stderr and "pulled" in rerun.stderr  # a warning: the library never prints
    assert image_store.sha256_file(store / "store" / f"{cpu_image.sha256}.sif") == cpu_image.sha256
    again = manifest(runs_dir / "again")
    assert again["image"]["sha256"] == cpu_image.sha256 and again["rerun_of"] == "first"
    assert wait_for_slurm_job(again["scheduler"]["job_id"]) == "COMPLETED"
    assert json.loads((runs_dir / "again" / "results.json").read_text())["image_sha256"] == cpu_image.sha256
