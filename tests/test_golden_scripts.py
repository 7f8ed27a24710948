"""`run-cluster CLUSTER PROFILE --dry-run` for every profile of every cluster equals a reviewed golden file.

Regenerate after a deliberate change with CT_UPDATE_GOLDEN=1 and review the diff (git diff tests/golden)."""
import os
from pathlib import Path

import pytest
import yaml

from train.host import cli, images

ROOT = Path(__file__).resolve().parents[1]
EXPERTS = "/work/experts"  # how the golden files show the settings' experts directory
GOLDEN = ROOT / "tests" / "golden"
# the per-user accounts of the clusters that need one, as a settings file gives them
ACCOUNTS = "clusters:\n  gilbreth: {account: lusu}\n  perlmutter: {account: m1234}\n  narval: {account: def-someprof}\n"
SMALL_CLUSTERS = {"local", "ci-slurm", "ci-lsf"}  # this machine's clusters train the small demo
# seed 001's packing trains experts, then fusion heads (by cluster, or cluster/profile)
EXPERIMENT = {"slurm-4gpu": "cifar100_fusion", "ci-slurm/experts_4x1": "cifar100_experts",
              "ci-slurm/fusion_4x1": "cifar100_fusion"}


def every_profile():
    for path in sorted((ROOT / "clusters").glob("*.yaml")):
        for profile in yaml.safe_load(path.read_text())["profiles"]:
            yield path.stem, profile


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("golden")
    for flavor in ("cpu", "cuda11.6", "cuda12.8"):  # stand-in images with fixed content, so fixed digests
        (tmp / f"{flavor}.sif").write_text(f"stand-in {flavor} image\n")
        images.record(flavor, tmp / f"{flavor}.sif", ROOT / "pyproject.toml", ROOT / "pyproject.toml", root=tmp / "images")
    for arch in ("densenet_cifar", "resnet_cifar", "improved_wide_resnet", "resnext_cifar"):
        (tmp / "experts" / arch).mkdir(parents=True)  # the packed fusion tasks' inputs must exist
    (tmp / "settings.yaml").write_text(f"email: student@example.edu\nexperts: {tmp / 'experts'}\n{ACCOUNTS}")
    return {**os.environ, "CT_IMAGES": str(tmp / "images"), "CT_SETTINGS": str(tmp / "settings.yaml"),
            "CT_RUNS_DIR": str(tmp / "runs")}, tmp


@pytest.mark.parametrize("cluster, profile", list(every_profile()))
def test_dry_run_script_matches_golden(env, cluster, profile, monkeypatch, capsys):
    """In this process (bin/run-cluster's own main, as a subprocess would run it: ~0.6 s less per profile)."""
    variables, tmp = env
    for name in ("CT_IMAGES", "CT_SETTINGS", "CT_RUNS_DIR"):
        monkeypatch.setenv(name, variables[name])
    experiment = EXPERIMENT.get(f"{cluster}/{profile}") or EXPERIMENT.get(cluster) or (
        "demo" if cluster in SMALL_CLUSTERS else "cifar100_resnet")
    status = cli.main([cluster, profile, experiment, "--dry-run", "--run-id", "golden"])
    out, err = capsys.readouterr()
    assert status == 0, err
    rendered = (out.replace(str(tmp / "images"), "<images>").replace(str(tmp / "runs"), "<runs>")
                .replace(str(tmp / "experts"), EXPERTS).replace(str(ROOT), "<repo>"))
    golden = GOLDEN / cluster / f"{profile}.txt"
    if os.environ.get("CT_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert golden.is_file(), f"no golden file {golden}: run with CT_UPDATE_GOLDEN=1 and review it"
    assert rendered == golden.read_text()
