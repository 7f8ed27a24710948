"""A new run refuses an image built from other code than the checkout's (it would train with the image's code while
the manifest says the checkout's), naming what changed; --stale-image-ok submits anyway, --dry-run warns."""
import shutil

from conftest import ROOT, run_cluster

from cluster_train.host.images import content_key, store as image_store
from cluster_train.host.images.content_key import stale_inputs


def small_repo(tmp_path):
    repo = tmp_path / "repo"
    for rel in ("containers/cpu.def", "containers/cpu.lock", "containers/install.sh", "pyproject.toml"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, repo / rel)
    for rel in ("cluster_train/image/fit.py", "cluster_train/image/models/resnet.py", "cluster_train/host/cli.py"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(f"# {rel}\n")
    return repo


def built(repo):
    """What `make image` leaves: the image recorded with its content key, and the key's listing (the stamp)."""
    text = content_key.inputs_text("containers/cpu.def", "containers/cpu.lock", repo)
    (repo / "images").mkdir()
    (repo / "images" / "cpu.sif").write_text("an image\n")
    content_key.write_stamp(repo / "images" / "cpu.inputs", text)
    return image_store.record("cpu", repo / "images" / "cpu.sif", repo / "containers" / "cpu.def",
                              repo / "containers" / "cpu.lock", root=repo / "images",
                              inputs_sha256=image_store.sha256_text(text))


def test_the_files_changed_since_the_build_are_named(tmp_path):
    repo = small_repo(tmp_path)
    record = built(repo)
    assert stale_inputs(record, repo) is None
    (repo / "cluster_train" / "host" / "cli.py").write_text("# the login-node side is not in the image\n")
    assert stale_inputs(record, repo) is None
    (repo / "cluster_train" / "image" / "fit.py").write_text("# changed\n")
    (repo / "cluster_train" / "new_module.py").write_text("")
    assert stale_inputs(record, repo) == "cluster_train/image/fit.py, cluster_train/new_module.py"


def test_an_imported_image_of_unknown_inputs_is_not_judged(tmp_path):
    record = built(small_repo(tmp_path))
    record.inputs_sha256 = ""
    assert stale_inputs(record, tmp_path / "repo") is None


def test_a_stale_image_is_refused_unless_asked_for(store):
    """The store fixture's stand-in image, recorded as built from inputs this checkout no longer has."""
    sif = store / "old.sif"
    sif.write_text("an old image\n")
    image_store.record("cpu", sif, ROOT / "containers" / "cpu.def", ROOT / "containers" / "cpu.lock",
                       root=store / "images", inputs_sha256="0" * 64)
    args = ["local", "cpu_1proc", "demo"]
    done = run_cluster(*args, "--no-wait")
    assert done.returncode == 2 and "built from other code than this checkout" in done.stderr
    assert "--stale-image-ok" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert list((store / "runs").iterdir()) == []
    dry = run_cluster(*args, "--dry-run")
    assert dry.returncode == 0 and "warning: the cpu image" in dry.stderr
    allowed = run_cluster(*args, "--dry-run", "--stale-image-ok")
    assert allowed.returncode == 0
