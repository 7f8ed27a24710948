"""Host tests again, inside the image, run by its own torch, torchvision, Lightning and DeepSpeed: the model tests
and the experiment size tests (with the torchvision-based models vgg, mobilenet, mobilenet_finetuned and
efficientnet, which the host venv must skip: tests/suite_report.py allows those skips by name), the registry drift test
(every lazy table entry against the image's own code) and the multi-process strategy, resume and export tests."""
import subprocess

import pytest

from conftest import ROOT


@pytest.mark.image
def test_every_registered_model_passes_the_model_tests_in_the_image(cpu_image, tmp_path):
    done = subprocess.run(  # conftest's ROOT is /opt there: the experiment files the size tests read go to /opt too
        ["apptainer", "exec", "--cleanenv", "--no-home", "-B", f"{ROOT / 'tests'}:/opt/ct-tests:ro",
         "-B", f"{ROOT / 'experiments'}:/opt/experiments:ro", "-B", str(tmp_path), "--pwd", str(tmp_path),
         cpu_image.path,
         # --rootdir: pytest loads conftest.py files from the rootdir down, and tests/conftest.py is above image/
         "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         "--rootdir", "/opt/ct-tests", "/opt/ct-tests/image/test_models.py",
         "/opt/ct-tests/image/test_experiment_sizes.py", "/opt/ct-tests/image/test_registry_drift.py"],
        capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-3000:]


@pytest.mark.image
def test_every_strategy_trains_resumes_and_exports_in_the_image(cpu_image, tmp_path):
    """Issue 5's acceptance where it must hold: the multi-process strategy, resume and export tests, run by the
    image's own torch, Lightning and DeepSpeed (which JIT-compiles its CPU comm op there with the image's g++); with
    them channels-last under ZeRO and torch.compile under DDP (the op and inductor's kernels cached under /tmp)."""
    done = subprocess.run(
        ["apptainer", "exec", "--cleanenv", "--no-home", "-B", f"{ROOT / 'tests'}:/opt/ct-tests:ro", "-B",
         str(tmp_path),
         "--pwd", str(tmp_path), cpu_image.path,
         "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         "--rootdir", "/opt/ct-tests", "/opt/ct-tests/image/test_strategies.py",
         "/opt/ct-tests/image/test_resume_export.py", "/opt/ct-tests/image/test_zero_layout.py",
         "/opt/ct-tests/image/test_compile_ddp.py"],
        capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-3000:]
