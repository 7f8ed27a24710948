"""The built CPU image (issue 56 item 5): both Lightning import names work in it, and its build recorded the list of
modules it can import (label org.cluster-train.modules, containers/install.sh), which the host checks a command's
imports against before queueing (tests/host/test_imports_check.py, with a tiny SIF)."""
import json
import subprocess

import pytest

from cluster_train.host.jobs import imports_check

pytestmark = pytest.mark.image


def test_both_lightning_names_import_in_the_image_and_its_module_list_has_them(cpu_image):
    labels = json.loads(subprocess.run(["apptainer", "inspect", "--labels", "--json", cpu_image.path],
                                       capture_output=True, text=True, check=True).stdout)["data"]["attributes"]["labels"]
    listed = set(labels[imports_check.MODULES_LABEL].split())
    assert {"lightning", "pytorch_lightning", "torch", "torchvision", "numpy", "deepspeed", "cluster_train", "train",
            "os", "json"} <= listed
    assert "timm" not in listed  # what it does not hold, it does not list
    assert labels["org.cluster-train.lightning"] == labels["org.cluster-train.pytorch-lightning"]
    ran = subprocess.run(["apptainer", "exec", "--cleanenv", "--no-home", cpu_image.path, "python", "-c",
                          "import lightning, pytorch_lightning; "
                          "from lightning.pytorch import Trainer; from lightning.fabric import Fabric; "
                          "print(lightning.__version__, pytorch_lightning.__version__)"],
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == [labels["org.cluster-train.lightning"]] * 2


def test_the_real_images_list_refuses_a_missing_import_and_passes_lightning(cpu_image, tmp_path):
    """End to end on this checkout's image: a dry run of a script importing timm is refused before anything is
    queued; the same script importing lightning instead passes."""
    from conftest import run_cluster

    code = tmp_path / "proj"
    code.mkdir()
    (code / "train.py").write_text("import lightning as L\nimport timm\n")
    env = {"CT_RUNS_DIR": str(tmp_path / "runs")}
    refused = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd=code, env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"command: train.py imports timm (line 2), which the cpu image sha256:{cpu_image.sha256[:12]} does " \
           f"not have" in refused.stderr
    (code / "train.py").write_text("import lightning as L\nimport pytorch_lightning\nimport torch\n")
    passed = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd=code, env=env)
    assert passed.returncode == 0, passed.stderr
    assert "module" not in passed.stdout + passed.stderr
