"""What a job would cost and when it would start, said before anything is queued (issue 46): the dry run prints the
scheduler's own start estimate (Slurm's `sbatch --test-only`; LSF gives none before a job is queued) and the most
the job can cost, its time limit x its GPUs."""
import datetime
import re

import yaml
from conftest import ROOT, run_cluster


def later_cluster(tmp_path, begin: str):
    """ci-slurm's cluster file with one profile, `later`: n1_gpu1 asked to begin no sooner than `begin`."""
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["profiles"] = {"later": {**cluster["profiles"]["n1_gpu1"], "directives": [f"--begin={begin}"]}}
    path = tmp_path / "ci-slurm-later.yaml"
    path.write_text(yaml.safe_dump(cluster))
    return path


def test_a_dry_run_prints_slurm_s_start_estimate_and_the_most_it_costs(cpu_image, slurm_cluster, demo_data,
                                                                        tmp_path, runs_dir):
    """A job that may begin only in two hours: the estimate is Slurm's (two hours from now), not the clock's."""
    begin = datetime.datetime.now().replace(microsecond=0) + datetime.timedelta(hours=2)
    dry = run_cluster(later_cluster(tmp_path, begin.isoformat()), "later", "demo", "--set", "data.num_workers=0",
                      "--set", f"data.root={demo_data}", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    estimate = re.search(r"^start: Slurm expects it at (\S+) on n\d in partition ci \(sbatch --test-only, nothing "
                         r"queued\)$", dry.stdout, re.M)
    assert estimate, dry.stdout[:2000]
    assert abs((datetime.datetime.fromisoformat(estimate[1]) - begin).total_seconds()) < 120, (estimate[1], begin)
    assert "cost: at most 0.33 GPU-hours (time 00:20:00 x 1 GPU(s)), each requeue as much again" in dry.stdout
    assert not list(runs_dir.iterdir())  # nothing written, and --test-only queues nothing

    lsf = run_cluster("ci-lsf", "single_host_2gpu", "demo", "--set", f"data.root={demo_data}", "--sweep",
                      "optim.lr=0.1,0.2", "--dry-run")
    assert lsf.returncode == 0, lsf.stderr
    assert "start: LSF gives no start estimate before a job is queued" in lsf.stdout
    assert "cost: at most 1.33 GPU-hours (time 0:20 x 2 GPU(s) x 2 runs), each requeue as much again" in lsf.stdout
