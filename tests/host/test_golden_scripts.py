"""`run-cluster CLUSTER PROFILE --dry-run` for every profile of every cluster equals a reviewed golden file.

Regenerate after a deliberate change with CT_UPDATE_GOLDEN=1 and review the diff (git diff tests/golden)."""
import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import squashfs_stand_in

from cluster_train.host import cli
from cluster_train.host.data import store as data_store
from cluster_train.host.images import store

ROOT = Path(__file__).resolve().parents[2]
EXPERTS = "/work/experts"  # how the golden files show the settings' experts directory
GOLDEN = ROOT / "tests" / "golden"
# the per-user accounts of the clusters that need one, as a settings file gives them
ACCOUNTS = "clusters:\n  gilbreth: {account: lusu}\n  perlmutter: {account: m1234}\n  narval: {account: def-someprof}\n"
SMALL_CLUSTERS = {"local", "ci-slurm", "ci-lsf"}  # this machine's clusters train the small demo
# seed 001's packing trains experts, then fusion heads (by cluster, or cluster/profile)
EXPERIMENT = {"slurm-4gpu": "cifar100_fusion", "slurm-4gpu/experts_4gpu": "cifar100_experts",
              "ci-slurm/experts_4x1": "cifar100_experts",
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
        store.record(flavor, tmp / f"{flavor}.sif", ROOT / "pyproject.toml", ROOT / "pyproject.toml",
                     root=tmp / "images")
    for arch in ("densenet_cifar", "resnet_cifar", "improved_wide_resnet", "resnext_cifar"):
        (tmp / "experts" / arch).mkdir(parents=True)  # the packed fusion tasks' inputs must exist
    data = squashfs_stand_in(tmp / "ufc10.sqsh")
    data_store.add("ufc10", data, store.sha256_file(data), data_store.data_root(tmp / "images"), str(tmp), files=1)
    (tmp / "settings.yaml").write_text(f"email: student@example.edu\nexperts: {tmp / 'experts'}\n{ACCOUNTS}")
    return {**os.environ, "CT_IMAGES": str(tmp / "images"), "CT_SETTINGS": str(tmp / "settings.yaml"),
            "CT_RUNS_DIR": str(tmp / "runs")}, tmp


# the seeds' own experiments on their clusters' profiles, and your own code (examples/) as a user submits it
GILBRETH = [p for c, p in every_profile() if c == "gilbreth"]
LIGHTNING = ["examples/lightning_smart/experiment.yaml", "--", "python", "train.py", "--config"]
SEED_RUNS = {
    "navsim_planner/torch-hpc-l40s_4x4": ["torch-hpc", "l40s_4x4", "navsim_planner"],
    **{f"smart_motion/gilbreth-{p}": ["gilbreth", p, "smart_motion"] for p in GILBRETH},
    "lightning_smart/gilbreth-multi_node_4x1": ["gilbreth", "multi_node_4x1", *LIGHTNING,
                                                "configs/train/train_a100_n4_gpu1.yaml"],
    "ddp_plain/ci-slurm-n2_gpu2": ["ci-slurm", "n2_gpu2", "examples/ddp_plain/experiment.yaml"],
    # a data image (data.image) copied to each node's local disk, then bound read-only at data.root
    "action_recognition/ci-slurm-n2_staged": ["ci-slurm", "n2_staged", "action_recognition", "--set",
                                              "data.image=ufc10", "--set", "data.num_workers=1"],
}

# a sweep: one job array of every element's run, each element's own job.sh as for one run
# (tests/cluster/test_sweeps.py)
SWEEP = ["demo", "--sweep", "model.params.width=4,6,8", "--sweep", "optim.lr=0.05,0.1", "--max-parallel", "2"]
SWEEP_RUNS = {"ci-slurm-n1_gpu1": ["ci-slurm", "n1_gpu1", *SWEEP], "ci-lsf-one_gpu": ["ci-lsf", "one_gpu", *SWEEP],
              "local-cpu_1proc": ["local", "cpu_1proc", *SWEEP]}


@pytest.mark.parametrize("cluster, profile", list(every_profile()))
def test_dry_run_script_matches_golden(env, cluster, profile, monkeypatch, capsys):
    """In this process (bin/run-cluster's own main, as a subprocess would run it: ~0.6 s less per profile)."""
    experiment = EXPERIMENT.get(f"{cluster}/{profile}") or EXPERIMENT.get(cluster) or (
        "demo" if cluster in SMALL_CLUSTERS else "cifar100_resnet")
    matches_golden(env, [cluster, profile, experiment], GOLDEN / cluster / f"{profile}.txt", monkeypatch, capsys)


@pytest.mark.parametrize("name", list(SEED_RUNS))
def test_seed_experiments_on_their_profiles_match_golden(env, name, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the experiment paths as a user in the checkout types them
    matches_golden(env, SEED_RUNS[name], GOLDEN / "experiments" / f"{name}.txt", monkeypatch, capsys)


@pytest.mark.parametrize("name", list(SWEEP_RUNS))
def test_sweep_scripts_match_golden(env, name, monkeypatch, capsys):
    matches_golden(env, SWEEP_RUNS[name], GOLDEN / "sweeps" / f"{name}.txt", monkeypatch, capsys)


def matches_golden(env, args, golden: Path, monkeypatch, capsys):
    variables, tmp = env
    for name in ("CT_IMAGES", "CT_SETTINGS", "CT_RUNS_DIR"):
        monkeypatch.setenv(name, variables[name])
    if "--" in args:
        at = args.index("--")
        args = [*args[:at], "--dry-run", "--run-id", "golden", *args[at:]]
    else:
        args = [*args, "--dry-run", "--run-id", "golden"]
    status = cli.main(args)
    out, err = capsys.readouterr()
    assert status == 0, err
    rendered = (out.replace(str(tmp / "images"), "<images>").replace(str(tmp / "runs"), "<runs>")
                .replace(str(tmp / "experts"), EXPERTS).replace(str(ROOT), "<repo>"))
    rendered = re.sub(r"\(git [0-9a-f]{12}( \+ uncommitted changes)?\)", "(git <commit>)", rendered)
    # asked of whatever scheduler this machine reaches, at this moment (tests/cluster/test_estimates.py)
    rendered = re.sub(r"^start: .*$", "start: <the scheduler's estimate>", rendered, flags=re.M)
    if os.environ.get("CT_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert golden.is_file(), f"no golden file {golden}: run with CT_UPDATE_GOLDEN=1 and review it"
    assert rendered == golden.read_text()
