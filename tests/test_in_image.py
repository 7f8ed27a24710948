"""The model tests again, inside the image: there Debian's torchvision exists, so the torchvision-based models
(vgg, mobilenet, mobilenet_finetuned, efficientnet), which the host test venv must skip, are built and trained too."""
import subprocess

import pytest

from conftest import ROOT


@pytest.mark.image
def test_every_registered_model_passes_the_model_tests_in_the_image(cpu_image, tmp_path):
    done = subprocess.run(
        ["apptainer", "exec", "--cleanenv", "--no-home", "-B", f"{ROOT / 'tests'}:/opt/ct-tests:ro", "-B", str(tmp_path),
         "--pwd", str(tmp_path), cpu_image.path,
         "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "/opt/ct-tests/test_models.py"],
        capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-3000:]
