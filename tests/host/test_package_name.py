"""The package is cluster_train (issue 41), so a user's own `train` module or package, first on sys.path in a notebook
or a project, cannot hide it. `train` is a two-file shim kept only for `python -m train ...` (every job script runs it):
the host install ships cluster_train alone, the image both (containers/install.sh)."""
import os
import shutil
import subprocess
import sys
import zipfile

from conftest import ROOT


def python(*args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)


def test_a_users_own_train_package_does_not_hide_the_api(tmp_path):
    users_own = tmp_path / "train"
    users_own.mkdir()
    (users_own / "__init__.py").write_text("raise ImportError('a module of the user named train')\n")
    done = python("-c", "import cluster_train.host.cli, cluster_train.host.jobs.build", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_python_m_train_is_cluster_trains_image_command_line(tmp_path):
    shim = python("-m", "train", "names", cwd=tmp_path)
    assert shim.returncode == 0 and "models" in shim.stdout, shim.stderr
    assert shim.stdout == python("-m", "cluster_train", "names", cwd=tmp_path).stdout
    assert sorted(p.name for p in ROOT.joinpath("train").iterdir() if p.name != "__pycache__") == [
        "__init__.py", "__main__.py"]  # a shim, nothing that could drift from cluster_train


def test_the_host_install_ships_no_top_level_train(tmp_path):
    src = tmp_path / "src"
    for name in ("cluster_train", "train"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", src)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(tmp_path / "out"), str(src)], capture_output=True, text=True,
                           timeout=120)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "out").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"cluster_train", "cluster_train-0.1.0.dist-info"}
    assert "cluster_train/host/schedulers/templates/slurm.sh.j2" in names  # package data followed the rename
