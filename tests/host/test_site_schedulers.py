"""A site's own scheduler without a fork (issue 40): an installed package's `cluster_train.schedulers` entry point, or
a `schedulers:` entry of the user's settings, gives an adapter whose own template renders a cluster file's script.
The package is a real installed distribution (a .dist-info with entry_points.txt) that importlib.metadata finds on
a temporary sys.path. Bad ones are refused in one line naming where they came from (the settings file's cases are in
tests/bad_inputs/site_schedulers.yaml)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_train.host import cli, schedulers

ROOT = Path(__file__).resolve().parents[2]

ADAPTER = '''from cluster_train.host.schedulers.base import Scheduler


class Pbs(Scheduler):
    name = "pbs"
    template = "pbs.sh.j2"
    default_launch = "lightning"
    launches = ("lightning",)
    directive_prefix = "#PBS"

    def log_name(self, job_name):
        return "job.out"


NOT_AN_ADAPTER = object()
'''

TEMPLATE = '''#!/bin/bash
#PBS -N {{ job.run_id | q }} -q {{ job.placement.partition | q }} -l walltime={{ job.placement.time | q }}
set -euo pipefail
{% include "_preamble.sh.j2" %}
'''

CLUSTER = """name: pbs-site
scheduler: pbs
apptainer: {nv: false}
partitions:
  batch: {image: cpu, gpus_per_node: 0, cpus_per_node: 2, mem_per_node_gb: 8, nodes: 1}
profiles:
  one:
    description: one process
    partition: batch
    ranks_per_node: 1
    cpus_per_task: 2
    mem_gb: 4
    time: "01:00:00"
    trainer: {accelerator: cpu, strategy: single}
"""


def install(site: Path, entry_points: str, source: str = ADAPTER) -> None:
    """The package ct_pbs (its adapter module and templates/pbs.sh.j2) as pip leaves it in site-packages."""
    (site / "ct_pbs" / "templates").mkdir(parents=True)
    (site / "ct_pbs" / "__init__.py").write_text(source)
    (site / "ct_pbs" / "templates" / "pbs.sh.j2").write_text(TEMPLATE)
    info = site / "ct_pbs-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ct-pbs\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[cluster_train.schedulers]\n{entry_points}\n")


@pytest.fixture
def site(store, tmp_path, monkeypatch):
    """A cluster file under `scheduler: pbs`, data, and a site-packages folder first on sys.path; afterwards the
    scheduler table and modules as they were, so no other test sees pbs."""
    (tmp_path / "pbs-site.yaml").write_text(CLUSTER)
    (tmp_path / "data").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield tmp_path / "site"
    schedulers.SCHEDULERS.pop("pbs", None)
    for name in [m for m in sys.modules if m.startswith(("ct_pbs", "cluster_train_site_"))]:
        sys.modules.pop(name)


def dry_run(tmp_path, capsys):
    argv = [str(tmp_path / "pbs-site.yaml"), "one", "demo", "--dry-run", "--run-id", "t",
            "--set", f"data.root={tmp_path / 'data'}"]
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_an_installed_packages_scheduler_renders_its_own_template(site, tmp_path):
    install(site, "pbs = ct_pbs:Pbs")
    env = {**os.environ, "PYTHONPATH": str(site)}  # the environment the package was installed into
    done = subprocess.run([sys.executable, str(ROOT / "bin" / "run-cluster"), str(tmp_path / "pbs-site.yaml"), "one",
                           "demo", "--dry-run", "--run-id", "t", "--set", f"data.root={tmp_path / 'data'}"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "#PBS -N t -q batch -l walltime=01:00:00\n" in done.stdout
    assert "ct_record()" in done.stdout  # the shared partials, included from the project's templates


def test_a_settings_file_names_a_sites_scheduler_file(site, tmp_path, capsys):
    install(site, "")  # the module and its templates/, with no entry point: only the settings name it
    (tmp_path / "settings.yaml").write_text(f"schedulers:\n  pbs: {site / 'ct_pbs' / '__init__.py'}\n")
    rc, out, err = dry_run(tmp_path, capsys)
    assert rc == 0, err
    assert "#PBS -N t -q batch -l walltime=01:00:00\n" in out
    assert schedulers.adapter("pbs").template_dir() == site / "ct_pbs" / "templates"


def test_settings_come_before_an_installed_package(site, tmp_path, capsys):
    install(site, "pbs = ct_pbs:NOT_AN_ADAPTER")  # would be refused, were it asked
    (tmp_path / "settings.yaml").write_text("schedulers:\n  pbs: ct_pbs:Pbs\n")
    assert dry_run(tmp_path, capsys)[0] == 0


@pytest.mark.parametrize("entry, source, said", [
    ("pbs = ct_pbs:Pbs", "import no_such_module\n", ["cannot import 'ct_pbs'", "ModuleNotFoundError"]),
    ("pbs = ct_pbs:NOT_AN_ADAPTER", ADAPTER, ["'NOT_AN_ADAPTER' in 'ct_pbs' is not a scheduler adapter"]),
    ("pbs = ct_pbs:Missing", ADAPTER, ["'Missing' in 'ct_pbs' is not a scheduler adapter"]),
    ("pbs = ct_pbs:Pbs\nslurm = ct_pbs:Pbs", ADAPTER, ["'slurm = ct_pbs:Pbs'", "reuses the built-in", "rename"]),
    ("torque = ct_pbs:Pbs", ADAPTER, ["unknown scheduler 'pbs'"]),
], ids=["fails-to-import", "not-a-scheduler", "no-such-name", "built-in-name", "other-name"])
def test_a_bad_entry_point_is_one_line_naming_its_package(site, tmp_path, capsys, entry, source, said):
    install(site, entry, source)
    rc, out, err = dry_run(tmp_path, capsys)
    assert rc == 2 and "#!/bin/bash" not in out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for fragment in said:
        assert fragment in err
    if entry.startswith("pbs"):
        assert "entry point 'pbs" in err or "'slurm" in err
        assert "package ct-pbs 0.1" in err


def test_an_adapter_named_otherwise_than_its_entry_point_is_refused(site, tmp_path, capsys):
    install(site, "torque = ct_pbs:Pbs")
    (tmp_path / "pbs-site.yaml").write_text(CLUSTER.replace("scheduler: pbs", "scheduler: torque"))
    rc, out, err = dry_run(tmp_path, capsys)
    assert rc == 2 and "its adapter's name is 'pbs', not 'torque'" in err and "ct-pbs 0.1" in err


def test_built_in_schedulers_never_scan_installed_packages(store, monkeypatch):
    """A dry run answers in a fraction of a second: reading every distribution's metadata is for other names."""
    import importlib.metadata

    from cluster_train.host import clusters

    def scan(*args, **kwargs):
        raise AssertionError("entry points scanned for a built-in scheduler")

    monkeypatch.setattr(importlib.metadata, "entry_points", scan)
    for name in ("gilbreth", "slurm-4gpu", "local"):
        clusters.load(ROOT / "clusters" / f"{name}.yaml")
