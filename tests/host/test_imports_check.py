"""Packages for your own code (issue 56 item 5), on the host: a command's imports checked against the image's module
list before anything is queued (cluster_train/host/jobs/imports_check.py), with a real, tiny SIF carrying the label
a build gives (tests/host/test_image_commands.py build_sif); and `make lock-derived` from a fresh clone (uv installed
by make) and offline from a directory of wheels (cluster_train/host/images/wheel_lock.py). The real image's list and
both Lightning import names are checked in tests/image/test_image_modules.py."""
import hashlib
import os
import re
import shutil
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from host.test_image_commands import FLAVOR_LABELS, build_sif
from host.test_preflight import refused, run_cluster

from cluster_train.host.images import store as image_store
from cluster_train.host.jobs import imports_check

HAS = "os sys typing torch numpy lightning pytorch_lightning yaml"  # what the tiny image says it can import

SCRIPT = """\
import os, torch
import lightning as L
from timm import create_model          # line 3: not in the image
import model                           # the project's own model.py
from . import helpers                  # relative: the project's own
try:
    import wandb                       # optional: the script copes without it
except ImportError:
    wandb = None
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import mypy_extensions

def main():
    import einops                      # line 15: inside a function: a warning (it may never run)
    from pytorch_lightning import Trainer
"""


@pytest.fixture
def labelled(store):
    """The stand-in store's cpu image replaced by a real SIF whose module list is HAS."""
    sif = build_sif(store / "real" / "cpu.sif", FLAVOR_LABELS + f"    {imports_check.MODULES_LABEL} {HAS}\n")
    image_store.record("cpu", sif, ROOT / "pyproject.toml", ROOT / "pyproject.toml", root=store / "images")
    return store


def project(tmp_path: Path, script: str = SCRIPT) -> Path:
    code = tmp_path / "proj"
    code.mkdir()
    (code / "train.py").write_text(script)
    (code / "model.py").write_text("WIDTH = 8\n")
    return code


def test_an_import_the_image_lacks_is_refused_in_one_line_before_queueing(labelled, tmp_path):
    code = project(tmp_path)
    said = refused(run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd=code),
                   "command: train.py imports timm (line 3), which the cpu image sha256:",
                   "make lock-derived REQS=requirements.in FLAVOR=cpu", "images derive NAME --from cpu",
                   "--flavor cpu+NAME")
    assert len(said.strip().splitlines()) == 1
    assert not list((labelled / "runs").iterdir())


def test_the_python_api_says_the_same_before_submitting(labelled, tmp_path, monkeypatch):
    import cluster_train as ct

    monkeypatch.chdir(project(tmp_path))
    problems = ct.Job("local", "cpu_1proc", command=["python", "train.py"]).check()
    assert len(problems) == 1 and problems[0].startswith("command: train.py imports timm (line 3), which")
    assert not list((labelled / "runs").iterdir())


def test_what_the_image_has_the_stdlib_and_the_projects_own_modules_pass(labelled, tmp_path):
    code = project(tmp_path, SCRIPT.replace("from timm import create_model", "import json").replace(
        "import einops", "import helpers.deep"))
    (code / "helpers").mkdir()
    (code / "helpers" / "__init__.py").write_text("")
    done = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd=code)
    assert done.returncode == 0, done.stderr
    assert "module" not in done.stdout + done.stderr  # checked, nothing to say


def test_a_module_run_with_dash_m_is_read_from_the_snapshot(labelled, tmp_path):
    code = project(tmp_path, "print('top')\n")
    (code / "pkg").mkdir()
    (code / "pkg" / "__main__.py").write_text("import timm\n")
    refused(run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "-m", "pkg", cwd=code),
            "command: pkg/__main__.py imports timm (line 1)")


def test_an_image_without_a_module_list_is_a_warning_not_a_refusal(store, tmp_path):
    """The stand-in images (and any image built before the list) record none: the run goes ahead, told so."""
    code = project(tmp_path)
    done = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd=code)
    assert done.returncode == 0, done.stderr
    warning = [line for line in (done.stdout + done.stderr).splitlines() if "records no list of its modules" in line]
    assert len(warning) == 1, done.stdout + done.stderr
    assert "imports of train.py (einops, lightning, pytorch_lightning, timm, torch) were not checked" in warning[0]
    assert "make image FLAVOR=cpu" in warning[0]


def test_the_parser_takes_every_required_import_and_skips_the_rest():
    top, lazy = imports_check.imports(SCRIPT, "train.py")
    assert top == {"os": 1, "torch": 1, "lightning": 2, "timm": 3, "model": 4, "typing": 10}
    assert lazy == {"einops": 15, "pytorch_lightning": 16}  # only inside main()
    assert imports_check.imports("def f(:\n", "bad.py") == ({}, {})  # Python says why when it runs: nothing refused
    optional = "try:\n    import a\nexcept (ValueError, ModuleNotFoundError):\n    pass\n" \
               "try:\n    import b\nexcept ValueError:\n    pass\n"
    assert imports_check.imports(optional, "x.py") == ({"b": 6}, {})


def test_a_lazy_import_the_image_lacks_is_a_warning_and_the_run_goes_ahead(labelled, tmp_path):
    """`def plot(): import matplotlib` may never run: told before queueing, not refused."""
    code = project(tmp_path, "import torch\n\ndef plot():\n    import matplotlib\n")
    done = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd=code)
    assert done.returncode == 0, done.stderr
    assert ("warning: inside a function, train.py imports matplotlib (line 4), which the cpu image sha256:"
            in done.stdout + done.stderr), done.stdout + done.stderr


# --- make lock-derived --------------------------------------------------------------------------------------------

def without_uv() -> str:
    """PATH without any uv on it: a fresh clone's machine."""
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "uv").exists())


def make(*args, **env):
    return subprocess.run(["make", "-s", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PATH": without_uv(), **env})


def test_lock_derived_installs_uv_itself_on_a_fresh_clone_after_checking_its_inputs(tmp_path):
    venv = tmp_path / "venv"
    bad = make("lock-derived", "REQS=nope.in", f"VENV={venv}")
    assert bad.returncode == 2 and "give REQS=path/requirements.in" in bad.stderr
    assert not venv.exists()  # a bad input installs nothing
    reqs = tmp_path / "requirements.in"
    reqs.write_text("timm\n")
    dry = make("-n", "lock-derived", f"REQS={reqs}", f"VENV={venv}")
    assert dry.returncode == 0, dry.stderr
    assert f"python3 -m venv {venv}" in dry.stdout and f"{venv}/bin/python -m pip install -q uv" in dry.stdout
    assert f"{venv}/bin/uv pip compile --quiet --generate-hashes" in dry.stdout  # was `uv`: command not found


def wheel(directory: Path, name: str, version: str) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}/__init__.py", f"VERSION = {version!r}\n")
    return path


def test_lock_derived_offline_from_a_wheels_directory_needs_no_uv_and_no_index(tmp_path):
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    wheels.mkdir()
    mine, other = wheel(wheels, "myproject", "0.1.0"), wheel(wheels, "Tiny_Dep", "2.0")
    held = re.search(r"^pyyaml==(\S+)", (ROOT / "containers" / "cpu.lock").read_text(), re.M).group(1)
    wheel(wheels, "PyYAML", held)  # what pip download leaves beside them: the image has it at that version
    reqs = tmp_path / "requirements.in"
    reqs.write_text("myproject  # mine\npyyaml\n")
    done = make("lock-derived", f"REQS={reqs}", f"WHEELS={wheels}", f"VENV={venv}")
    assert done.returncode == 0, done.stderr
    assert not venv.exists()  # no uv was needed, or installed
    lock = (tmp_path / "requirements.lock").read_text()
    pinned = re.findall(r"^(\S+)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", lock, re.M)
    assert pinned == [("myproject", "0.1.0", hashlib.sha256(mine.read_bytes()).hexdigest()),
                      ("tiny-dep", "2.0", hashlib.sha256(other.read_bytes()).hexdigest())]
    from cluster_train.host.images import derive
    assert derive.check_lock(tmp_path / "requirements.lock") == ["myproject==0.1.0", "tiny-dep==2.0"]

    reqs.write_text("myproject\ntimm\n")
    missing = make("lock-derived", f"REQS={reqs}", f"WHEELS={wheels}")
    assert missing.returncode != 0 and f"asks for timm, which has no wheel in {wheels}" in missing.stderr
    (wheels / f"PyYAML-{held}-py3-none-any.whl").rename(wheels / "PyYAML-1.0-py3-none-any.whl")
    reqs.write_text("myproject\n")
    replaced = make("lock-derived", f"REQS={reqs}", f"WHEELS={wheels}")
    assert f"the cpu image holds pyyaml=={held}, which --no-deps would replace" in replaced.stderr
    assert [line for line in replaced.stderr.splitlines() if line.startswith("make lock-derived:")]


# --- the locks ----------------------------------------------------------------------------------------------------

def pinned(path: Path) -> dict:
    return dict(re.findall(r"^([a-z0-9-]+)==(\S+)", path.read_text(), re.M))


@pytest.mark.parametrize("flavor", ["cpu", "cuda12.8", "cuda11.6"])
def test_every_flavor_has_both_lightning_import_names_at_one_version(flavor):
    """`import lightning` failed in every image: only pytorch-lightning was locked."""
    requested = pinned(ROOT / "containers" / "requirements" / f"{flavor}.in")
    locked = pinned(ROOT / "containers" / f"{flavor}.lock")
    assert requested["lightning"] == requested["pytorch-lightning"] == locked["lightning"] \
        == locked["pytorch-lightning"]
    definition = (ROOT / "containers" / f"{flavor}.def").read_text()
    assert f"org.cluster-train.lightning {locked['lightning']}\n" in definition
    assert re.search(r"python -c 'import torch, torchvision, pytorch_lightning, lightning,", definition)
    if flavor == "cuda11.6":  # Lightning 2.2 is the last line for torch 1.13; it asks for fsspec<2025
        assert locked["lightning"].startswith("2.2.") and locked["fsspec"] < "2025"
    assert "org.cluster-train.modules" not in definition  # install.sh writes it; a %labels entry would win over it
    assert "APPTAINER_LABELS" in (ROOT / "containers" / "install.sh").read_text()
