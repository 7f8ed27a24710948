"""The path from the command line to the script is one pass: each config resolved once, settings read once, no
torch on the host, scheduler facts only in the scheduler adapters."""
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from host.test_golden_scripts import every_profile


@pytest.fixture
def loads(monkeypatch):
    """How often a command reads a cluster file and the user's settings, and resolves a run config."""
    from cluster_train.shared import config as cfg
    from cluster_train.host import clusters, settings

    calls = {"cluster file": 0, "settings": 0, "resolve": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(clusters, "load", counting("cluster file", clusters.load))
    monkeypatch.setattr(settings, "load", counting("settings", settings.load))
    monkeypatch.setattr(cfg, "resolve", counting("resolve", cfg.resolve))

    def taken():
        counted = dict(calls)
        calls.update({key: 0 for key in calls})
        return counted
    return taken


def test_a_packed_dry_run_resolves_each_config_once(store, loads, tmp_path):
    from cluster_train.host.jobs.build import Request, Site, build

    (tmp_path / "experts").mkdir()
    for arch in ("densenet_cifar", "resnet_cifar", "improved_wide_resnet", "resnext_cifar"):
        (tmp_path / "experts" / arch).mkdir()
    (tmp_path / "settings.yaml").write_text(f"experts: {tmp_path / 'experts'}\n")
    sub = build(Site.load("slurm-4gpu"), Request("fusion_4gpu", "cifar100_fusion", ["trainer.max_epochs=2"],
                                                 run_id="one-pass", dry_run=True))
    assert len(sub.job.work.tasks) == 4
    assert loads() == {"cluster file": 1, "settings": 1, "resolve": 1 + 4}  # the job's config, then each task's
    assert {r.task_params["fusion"] for r in sub.task_runs} == {"multiplicative", "multiplicativeAddition",
                                                                  "TransformerBase", "concatenation"}


def test_every_command_that_builds_jobs_reads_the_site_once_and_resolves_each_config_once(store, loads, monkeypatch,
                                                                                           capsys):
    """submit, dry run, --rerun, resume, a sweep and check-cluster, through the command line; the scheduler's
    submit is the one stand-in (it records an immediate failure, so the run can be resumed)."""
    from cluster_train.host.cli import main
    from cluster_train.host.schedulers import SCHEDULERS

    def failed_at_once(script, run_dir):
        (run_dir / "logs" / "exit_code").write_text("1\n")
        return "4242"

    monkeypatch.setattr(SCHEDULERS["local"], "submit", failed_at_once)
    once = {"cluster file": 1, "settings": 1}
    command = ["local", "cpu_1proc", "demo", "--set", "trainer.max_epochs=1"]
    assert main([*command, "--dry-run", "--run-id", "dry"]) == 0
    assert loads() == {**once, "resolve": 1}
    assert main([*command, "--run-id", "first", "--no-wait", "--stale-image-ok"]) == 0
    assert loads() == {**once, "resolve": 1}
    run_dir = str(store / "runs" / "first")
    assert main(["--rerun", run_dir, "--run-id", "again", "--no-wait"]) == 0
    assert loads() == {**once, "resolve": 1}
    assert main(["resume", run_dir, "--no-wait"]) == 0
    assert loads() == {**once, "resolve": 1}
    assert main([*command, "--sweep", "optim.lr=0.1,0.01,0.001", "--dry-run", "--run-id", "sweep"]) == 0
    assert loads() == {**once, "resolve": 3}  # one per element
    assert main(["check-cluster", "local", "--no-scheduler"]) == 0
    profiles = capsys.readouterr().out.count("\nok ")
    assert profiles >= 2 and loads() == {**once, "resolve": profiles}


BLOCK_TORCH = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'pytorch_lightning', 'lightning', 'deepspeed', 'torchvision', 'numpy'):
            raise ImportError('the host side must not import ' + name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, sys.argv[1])
from cluster_train.host.cli import main
import os
failed = []
for cluster, profile, experiment in [a.split('/') for a in sys.argv[2:]]:
    code = main([cluster, profile, experiment, '--dry-run', '--run-id', 'notorch'])
    if code != 0:
        failed.append((cluster, profile, code))
assert main(['names']) == 0
assert not failed, failed
assert 'torch' not in sys.modules
"""


def test_a_build_parses_its_time_limit_once_and_looks_up_its_adapter_and_launch_shape_once(store, monkeypatch,
                                                                                             tmp_path):
    """Issue 57 item 1: the resolved job carries what it resolved, its time limit in seconds (time_s), its adapter
    and its launch shape, and the checks, the cost and the budget read those: one parse and one look-up per build."""
    from cluster_train.host.jobs import build as building, cost, resolve
    from cluster_train.host.jobs.build import Request, Site, build
    from cluster_train.host.schedulers.slurm import Slurm

    parsed, looked_up, shaped = [], [], []
    real_parse, real_adapter, real_launch = Slurm.time_seconds, building.adapter, resolve.launch_of
    monkeypatch.setattr(Slurm, "time_seconds", lambda self, text: parsed.append(text) or real_parse(self, text))
    for module in (building, resolve):
        monkeypatch.setattr(module, "adapter", lambda name: looked_up.append(name) or real_adapter(name))
        monkeypatch.setattr(module, "launch_of", lambda *given: shaped.append(given) or real_launch(*given))
    site = Site.load("ci-slurm")  # the cluster file's own validation (its partitions' max_time) is not the build's
    parsed.clear()
    sub = build(site, Request("n1_gpu1", "demo", [f"data.root={tmp_path}"], run_id="once", dry_run=True))
    assert sub.job.placement.time == "00:20:00" and sub.job.placement.time_s == 1200
    assert parsed == ["00:20:00"] and len(looked_up) == 2 and len(shaped) == 1  # the shape's adapter, the job's
    assert sub.job.adapter is real_adapter("slurm")
    sub.job.placement.time_s = 7200  # the cost reads the seconds the job carries, not its text again
    assert cost.most_hours(sub.job) == 2.0 and parsed == ["00:20:00"]


def test_the_host_side_never_imports_torch(store, tmp_path):
    """Every golden profile's dry run (and `names`) with torch, Lightning, DeepSpeed and numpy made unimportable."""
    import host.test_golden_scripts as golden

    for arch in ("densenet_cifar", "resnet_cifar", "improved_wide_resnet", "resnext_cifar"):
        (tmp_path / "experts" / arch).mkdir(parents=True)
    (tmp_path / "settings.yaml").write_text(f"experts: {tmp_path / 'experts'}\n{golden.ACCOUNTS}")
    cases = []
    for cluster, profile in every_profile():
        experiment = golden.EXPERIMENT.get(f"{cluster}/{profile}") or golden.EXPERIMENT.get(cluster) or (
            "demo" if cluster in golden.SMALL_CLUSTERS else "cifar100_resnet")
        cases.append(f"{cluster}/{profile}/{experiment}")
    done = subprocess.run([sys.executable, "-c", BLOCK_TORCH, str(ROOT), *cases], capture_output=True, text=True,
                          env={**__import__("os").environ, "CT_SETTINGS": str(tmp_path / "settings.yaml")})
    assert done.returncode == 0, done.stderr[-3000:]


def test_only_the_scheduler_adapters_name_a_scheduler():
    """Facts about Slurm, LSF and the local runner live in their adapters (cluster_train/host/schedulers/), not in
    if/else elsewhere in cluster_train/host/."""
    pattern = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](slurm|lsf|local)["']|["'](slurm|lsf|local)["']\s*(==|!=)""")
    host = ROOT / "cluster_train" / "host"
    offenders = [f"{path.relative_to(host)}:{n}: {line.strip()}" for path in sorted(host.rglob("*.py"))
                 if "schedulers" not in path.relative_to(host).parts
                 for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_the_image_content_key_leaves_out_the_host_side(tmp_path):
    from cluster_train.host.images import content_key

    files = content_key.input_files("containers/cpu.def", "containers/cpu.lock", ROOT)
    assert "cluster_train/shared/config.py" in files and "cluster_train/image/fit.py" in files
    # the job templates too (host/schedulers/templates)
    assert not [f for f in files if f.startswith("cluster_train/host/")]


def test_flavors_are_the_definition_files():
    from cluster_train.host.clusters.flavors import image_flavors

    assert sorted(image_flavors()) == sorted(p.stem for p in (ROOT / "containers").glob("*.def"))


@pytest.mark.parametrize("template", ["slurm.sh.j2", "lsf.sh.j2"])
def test_master_port_has_one_formula(template):
    text = (ROOT / "cluster_train" / "host" / "schedulers" / "templates" / template).read_text()
    assert "20000" not in text and "master_port(" in text
    from cluster_train.shared.ports import master_port, master_port_shell

    assert master_port(12345) == 32345 and master_port_shell("X") == "$((20000 + X % 20000))"
