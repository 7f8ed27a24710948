"""Signed images (issue 12): `images sign` stores a signed copy as a new image (its record names the build it came
from), and `require_signed` refuses an unsigned or foreign-signed image at submission and inside the job. The key
pairs are made here, in temporary keyrings ($APPTAINER_KEYSDIR), never committed."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, job_logs, manifest, run_cluster, wait_for_slurm_job
from host.test_image_commands import build_sif, images_command, store_files


def new_keyring(path, name: str) -> str:
    """A keyring holding one fresh key pair without passphrase; its fingerprint (lower case)."""
    subprocess.run(["apptainer", "key", "newpair", f"--keysdir={path}", f"--name={name}", f"--email={name}@example.org",
                    "--password=", "--push=false", "--bit-length=2048"], check=True, capture_output=True)
    listed = subprocess.run(["apptainer", "key", "list", f"--keysdir={path}"], capture_output=True, text=True,
                            check=True)
    return next(line.split()[-1].lower() for line in listed.stdout.splitlines() if "Fingerprint" in line)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two users' keyrings: the lab's own key, and a stranger's."""
    base = tmp_path_factory.mktemp("keys")
    return {who: (base / who, new_keyring(base / who, who)) for who in ("lab", "stranger")}


@pytest.fixture
def store(tmp_path, monkeypatch, keys):
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "store"))
    (tmp_path / "settings.yaml").write_text("{}\n")  # $CT_SETTINGS must name a file
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("APPTAINER_KEYSDIR", str(keys["lab"][0]))
    return tmp_path / "store"


def index(store):
    return json.loads((store / "index.json").read_text())


def test_signing_stores_a_signed_copy_as_a_new_image(store, keys, tmp_path):
    images_command("import", build_sif(tmp_path / "cpu.sif"))
    built = index(store)[0]
    before = (store / "store" / f"{built['sha256']}.sif").read_bytes()
    done = images_command("sign", "cpu")
    assert done.returncode == 0, done.stderr
    built_record, signed = index(store)
    assert signed["signed_from"] == built["sha256"] and signed["signers"] == [keys["lab"][1]]
    assert signed["sha256"] != built["sha256"] and f"signed cpu image sha256:{signed['sha256']}" in done.stdout
    assert (store / "store" / f"{built['sha256']}.sif").read_bytes() == before  # the build is never rewritten
    assert sorted(p.name for p in (store / "store").iterdir()) == sorted(f"{r['sha256']}.sif" for r in (built, signed))
    assert f"signed by {keys['lab'][1]}" in images_command("list").stdout
    no_key = images_command("sign", "cpu", env={**os.environ, "APPTAINER_KEYSDIR": str(tmp_path / "empty")})
    assert no_key.returncode == 2 and len(no_key.stderr.strip().splitlines()) == 1, no_key.stderr
    assert "apptainer sign" in no_key.stderr and len(index(store)) == 2


def submit(*extra, env=None):
    return run_cluster("local", "cpu_1proc", "demo", "--set", "trainer.max_epochs=1", *extra, env=env)


def test_require_signed_refuses_what_is_not_signed_by_an_allowed_key_before_queueing(store, keys, tmp_path):
    images_command("import", build_sif(tmp_path / "cpu.sif"))
    settings = tmp_path / "settings.yaml"
    settings.write_text("require_signed: true\n")
    unsigned = submit()
    assert unsigned.returncode == 2 and "is not signed" in unsigned.stderr and "images sign sha256:" in unsigned.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing queued
    assert images_command("sign", "cpu").returncode == 0
    assert submit("--dry-run").returncode == 0  # signed by a key of the keyring: any, as no signers are named
    stranger = submit("--dry-run", env={**os.environ, "APPTAINER_KEYSDIR": str(keys["stranger"][0])})
    assert stranger.returncode == 2 and "does not hold or cannot verify" in stranger.stderr, stranger.stderr
    settings.write_text(f"require_signed: true\nsigners: [{keys['stranger'][1].upper()}]\n")
    foreign = submit("--dry-run")
    assert foreign.returncode == 2 and f"signed by {keys['lab'][1]}, not by a key" in foreign.stderr, foreign.stderr
    assert len(foreign.stderr.strip().splitlines()) == 1
    settings.write_text(f"require_signed: true\nsigners: [{keys['stranger'][1]}, {keys['lab'][1]}]\n")
    assert submit("--dry-run").returncode == 0


def second_checkout(dest):
    """Another clone of this working tree (its tracked and untracked-but-not-ignored files), as a lab mate has."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


@pytest.mark.image
@pytest.mark.slurm
def test_a_signed_image_from_a_shared_store_runs_and_the_job_refuses_one_it_cannot_verify(
        cpu_image, slurm_cluster, demo_data, store, keys, tmp_path, monkeypatch):
    """This clone records its built image into a shared store and signs it; another clone submits from that store
    to a cluster that requires the lab's signature. The job trains with the signed digest in its manifest. Two more
    jobs are held at submission: the keyring then loses the lab's key, and the first released job ends before
    apptainer exec with one line; the store copy is then modified in place, and the second ends likewise."""
    from cluster_train.host.images import store as image_store

    lab = shutil.copytree(keys["lab"][0], tmp_path / "lab-keys")  # this test revokes the key: its own keyring
    monkeypatch.setenv("APPTAINER_KEYSDIR", str(lab))  # sbatch passes it on to the job (--export=ALL)
    image_store.record("cpu", cpu_image.path, ROOT / "containers" / "cpu.def", ROOT / "containers" / "cpu.lock",
                       root=store)
    strict = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    strict.update(require_signed=True, signers=[keys["lab"][1]])
    strict["profiles"]["held"] = {**strict["profiles"]["n1_gpu1"], "directives": ["--hold"]}
    (tmp_path / "strict.yaml").write_text(yaml.safe_dump(strict, sort_keys=False))
    other = second_checkout(tmp_path / "other-clone")
    small = ["demo", "--set", f"data.root={demo_data}", "--set", "trainer.max_epochs=1", "--set", "data.num_workers=0"]

    def submit_from_other(profile, run_id):
        return subprocess.run([sys.executable, str(other / "bin" / "run-cluster"), str(tmp_path / "strict.yaml"),
                               profile, *small, "--run-id", run_id, "--no-wait"], capture_output=True, text=True)

    unsigned = submit_from_other("n1_gpu1", "unsigned")
    assert unsigned.returncode == 2 and "is not signed" in unsigned.stderr, unsigned.stderr
    before = store_files(store)
    assert images_command("sign", "cpu").returncode == 0
    signed = index(store)[-1]
    assert store_files(store).keys() >= before.keys()
    runs = tmp_path / "runs"
    done = [submit_from_other(*job) for job in (("n1_gpu1", "signed"), ("held", "held"), ("held", "tampered"))]
    assert all(d.returncode == 0 for d in done), "".join(d.stderr for d in done)
    recorded = manifest(runs / "signed")["image"]
    assert recorded["sha256"] == signed["sha256"] and recorded["signed_from"] == cpu_image.sha256
    assert (wait_for_slurm_job(manifest(runs / "signed")["scheduler"]["job_id"])
            == "COMPLETED"), job_logs(runs / "signed")
    assert json.loads((runs / "signed" / "results.json").read_text())["image_sha256"] == signed["sha256"]

    stranger = keys["stranger"][0] / "pgp-public"
    shutil.copy2(stranger, lab / "pgp-public")  # the lab's key revoked from this keyring
    job_id = manifest(runs / "held")["scheduler"]["job_id"]
    subprocess.run(["scontrol", "release", job_id], check=True)
    assert wait_for_slurm_job(job_id) == "FAILED"
    log = job_logs(runs / "held")
    assert "is not signed by a key of this user's keyring" in log and "strict.yaml requires signed images" in log, log
    assert not (runs / "held" / "results.json").exists() and "[cluster-train] job " not in log  # no step started

    with open(signed["path"] if os.path.isabs(signed["path"]) else store / signed["path"], "r+b") as sif:
        sif.seek(sif.seek(0, os.SEEK_END) // 2)
        sif.write(b"tampered")  # the shared store's copy changed in place after submission
    job_id = manifest(runs / "tampered")["scheduler"]["job_id"]
    subprocess.run(["scontrol", "release", job_id], check=True)
    assert wait_for_slurm_job(job_id) == "FAILED"
    log = job_logs(runs / "tampered")
    assert "is not the image recorded for run" in log and "[cluster-train] job " not in log, log
    rerun = run_cluster("--rerun", runs / "signed", "--no-wait")
    assert rerun.returncode == 2 and "was tampered with" in rerun.stderr, rerun.stderr
