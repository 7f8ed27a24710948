"""cluster_train/host/images/packages.py (contract C2): whether an image has JupyterLab, from its labels, before
anything is queued. Real, tiny SIFs (a scratch image with the labels a build gives, tests/host/test_image_commands.py)
stand for a current cpu image, one built before JupyterLab, the cuda11.6 image and a derived image."""
import shutil
import time
from pathlib import Path

import pytest

from cluster_train.host.images import packages, store
from host.test_image_commands import FLAVOR_LABELS, build_sif

pytestmark = pytest.mark.skipif(shutil.which("apptainer") is None, reason="apptainer builds the test SIFs")


def image(tmp_path: Path, flavor: str, jupyterlab: str = "") -> store.ImageRecord:
    labels = FLAVOR_LABELS.replace(" cpu\n", f" {flavor.split('+')[0]}\n")
    if jupyterlab:
        labels += f"    {packages.JUPYTERLAB_LABEL} {jupyterlab}\n"
    sif = build_sif(tmp_path / flavor / "image.sif", labels)
    return store.ImageRecord(flavor=flavor, path=str(sif), sha256="ab" * 32, def_sha256="", lock_sha256="",
                             inputs_sha256="", size=sif.stat().st_size, built_at="2026-11-27T10:00:00+0000",
                             git_commit=None)


def test_an_image_labelled_with_jupyterlab_has_it(tmp_path):
    started = time.monotonic()
    assert packages.jupyterlab_missing(image(tmp_path, "cpu", jupyterlab="4.6.6")) is None
    assert packages.jupyterlab_missing(image(tmp_path, "cuda12.8+myproject", jupyterlab="4.6.6")) is None
    assert time.monotonic() - started < 10  # two builds and two inspects; no container started


def test_a_cpu_image_built_before_jupyterlab_is_refused_with_the_rebuild(tmp_path):
    error = str(packages.jupyterlab_missing(image(tmp_path, "cpu")))
    assert error == ("JupyterLab is not in the cpu image sha256:abababababab (built 2026-11-27): rebuild the cpu "
                     "image with `make image FLAVOR=cpu` (its lock has JupyterLab now)")
    derived = str(packages.jupyterlab_missing(image(tmp_path, "cpu+myproject")))
    assert derived.endswith("then derive cpu+myproject from it again") and "\n" not in derived


def test_the_cuda11_6_image_is_refused_with_the_flavors_that_have_it(tmp_path):
    error = str(packages.jupyterlab_missing(image(tmp_path, "cuda11.6")))
    assert "JupyterLab is not in the cuda11.6 image" in error and "\n" not in error
    assert "use a cpu or cuda12.8 image" in error and "make image FLAVOR=cuda11.6" in error
