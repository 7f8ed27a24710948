"""A new scheduler is one new module plus its template (issue 25): a made-up one, written into tmp_path and registered,
renders a script for a made-up cluster file without any other module knowing its name."""
import sys

import pytest

from cluster_train.host import cli, schedulers

ADAPTER = '''"""A made-up scheduler: PBS-like directives, no arrays, no requeue (the base class's defaults say so)."""
from cluster_train.host.schedulers.base import Scheduler


class Madeup(Scheduler):
    name = "madeup"
    template = "madeup.sh.j2"
    default_launch = "lightning"
    launches = ("lightning",)
    directive_prefix = "#MADEUP"

    def log_name(self, job_name):
        return "job.out"
'''

# the shared partials come from cluster_train/host/schedulers/templates/, the adapter's own file from beside its module
TEMPLATE = '''#!/bin/bash
#MADEUP -N {{ job.run_id | q }} -q {{ job.placement.partition | q }} -l walltime={{ job.placement.time | q }}
set -euo pipefail
{% include "_preamble.sh.j2" %}
bash -c "$forward_env" forward-env \\
  {% include "_container.sh.j2" %} --config {{ job.work.config_path | q }} &
ct_steps+=($!)
rc=0; ct_wait_steps || rc=$?
ct_finish "$rc"
'''

CLUSTER = """name: madeup-site
description: a cluster under a scheduler no module of cluster_train/host knows
scheduler: madeup
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


@pytest.fixture
def madeup(tmp_path, monkeypatch):
    (tmp_path / "site" / "templates").mkdir(parents=True)
    (tmp_path / "site" / "ct_madeup.py").write_text(ADAPTER)
    (tmp_path / "site" / "templates" / "madeup.sh.j2").write_text(TEMPLATE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    import ct_madeup

    yield schedulers.register(ct_madeup.Madeup())
    schedulers.SCHEDULERS.pop("madeup")  # the table as it was: no other test sees the made-up scheduler
    sys.modules.pop("ct_madeup")


def test_a_made_up_scheduler_renders_its_own_template(store, madeup, tmp_path, capsys):
    (tmp_path / "madeup-site.yaml").write_text(CLUSTER)
    assert cli.main([str(tmp_path / "madeup-site.yaml"), "one", "demo", "--dry-run", "--run-id", "t"]) == 0
    out = capsys.readouterr().out
    script = out[out.index("#!/bin/bash"):]
    assert "#MADEUP -N t -q batch -l walltime=01:00:00\n" in script
    assert "ct_record()" in script and "apptainer" in script  # the shared partials, included
    assert madeup.template_dir() == tmp_path / "site" / "templates"


def test_register_refuses_a_second_adapter_of_a_name():
    with pytest.raises(Exception, match="already registered"):
        schedulers.register(schedulers.SCHEDULERS["slurm"])
