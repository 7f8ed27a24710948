"""Runs that start after others (--after, Request.after), ${run:<id>}, a cluster file's pipelines and the cause a run
that waited on a failed one gives: the checks made before anything is queued, against runs of the local scheduler
(its state is a file and a process id). The schedulers' own holding of a job: tests/cluster/test_pipelines.py."""
import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from cluster_train.shared.errors import UserError
from cluster_train.host.jobs.build import Request, Site
from cluster_train.host.runs import ending, pipeline
from cluster_train.host.jobs.run_refs import Waited
from cluster_train.host.runs.after import build_after
from cluster_train.host.schedulers import Lsf, Slurm, State

FUSION = ["task_params.experts_dir=${run:stage1}/checkpoints/resnet_cifar"]


def earlier_run(runs: Path, run_id: str, exit_code=None, cluster: str = "ci-slurm") -> Path:
    """A run of the local scheduler: ended with `exit_code`, or (None) still running as this test's process."""
    run_dir = runs / run_id
    (run_dir / "logs").mkdir(parents=True)
    if exit_code is not None:
        (run_dir / "logs" / "exit_code").write_text(f"{exit_code}\n")
    manifest = {"run_id": run_id, "cluster": cluster, "cluster_file": "ci-slurm", "profile": "n1_gpu1",
                "image": {"sha256": "ab"}, "scheduler": {"name": "local", "job_id": str(os.getpid())}, "job": {}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


def fusion(after, overrides=(), dry_run=True):
    request = Request("n1_gpu1", "cifar100_fusion", overrides=[*overrides, "data.num_workers=0"], after=list(after),
                      dry_run=dry_run)
    return build_after(Site.load("ci-slurm"), request)


@pytest.mark.parametrize("exit_code, cluster, said", [
    (1, "ci-slurm", "run stage1 ended FAILED, so it will never succeed; rerun it (run-cluster --rerun"),
    (None, "ci-lsf", "run stage1 ran on cluster ci-lsf, not ci-slurm; a job can wait only on runs of its own cluster"),
])
def test_after_refuses_a_run_that_can_never_be_waited_on(store, exit_code, cluster, said):
    run_dir = earlier_run(store / "runs", "stage1", exit_code, cluster)
    with pytest.raises(UserError, match="--after .*stage1: " + said.replace("(", r"\(")):
        fusion([run_dir], ["task_params.experts_dir=/tmp"])
    with pytest.raises(UserError, match=r"--after .*nope: no run there \(no manifest.json\)"):
        fusion([store / "runs" / "nope"], ["task_params.experts_dir=/tmp"])


def test_a_completed_run_needs_no_dependency_and_a_running_one_is_waited_on(store):
    done = earlier_run(store / "runs", "stage1", 0)
    (done / "checkpoints" / "resnet_cifar").mkdir(parents=True)
    assert fusion([done], FUSION).after == []
    running = earlier_run(store / "runs", "stage1b")
    sub = fusion([running], ["task_params.experts_dir=${run:stage1b}/checkpoints/resnet_cifar"])
    assert sub.after == [Waited("stage1b", str(os.getpid()), str(running.resolve()))]
    assert sub.run.task_params["experts_dir"] == f"{running.resolve()}/checkpoints/resnet_cifar"


def test_an_input_inside_a_run_is_accepted_only_where_the_job_waits_on_it(store):
    earlier_run(store / "runs", "stage1")
    with pytest.raises(UserError, match="task_params.experts_dir: .*stage1/checkpoints/resnet_cifar does not exist"):
        fusion([], FUSION)
    with pytest.raises(UserError, match=r"\$\{run:stage9\}: no run 'stage9' in"):
        fusion([], ["task_params.experts_dir=${run:stage9}/checkpoints"])


def test_schedulers_hold_a_job_with_submit_options_not_directives():
    assert Slurm().wait_options(["5", "6"]) == ["--dependency=afterok:5:6", "--kill-on-invalid-dep=yes"]
    assert Lsf().wait_options(["5", "6"]) == ["-w", "done(5) && done(6)", "-ti"]


def test_seed001_pipeline_is_checked_whole_and_its_fusion_reads_the_experts_stage(store):
    site = Site.load("ci-slurm")
    planned = pipeline.plan(site, "seed001", dry_run=True)
    experts, fusion_stage = (step.sub for step in planned)
    assert [step.stage.after for step in planned] == [[], ["experts"]]
    assert [Path(run.task_params["experts_dir"]).relative_to(experts.job.work.run_dir).parts[0]
            for run in fusion_stage.task_runs] == [Path(task.run_dir).name for task in experts.job.work.tasks]
    assert not Path(experts.job.work.run_dir).exists()  # a plan writes nothing
    with pytest.raises(UserError) as refused:
        pipeline.plan(site, "seed001", ["trainer.max_epochs=zero"], dry_run=True)
    assert {line.split(":")[0] for line in refused.value.lines} == {"stage experts", "stage fusion"}
    assert not any((store / "runs").iterdir())


@pytest.mark.parametrize("stages, said", [
    ([{"name": "b", "profile": "n1_gpu1", "after": ["a"]}], "stage 'b' waits on 'a', which is not an earlier stage"),
    ([{"name": "a", "profile": "n1_gpu1", "sets": {}}], "stage 'a' has unknown key 'sets'"),
    ([], "has no stages"),
])
def test_a_pipeline_written_wrong_is_refused_in_one_line(store, stages, said):
    cluster = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    cluster["pipelines"] = {"bad": {"stages": stages}}
    (store / "bad.yaml").write_text(yaml.safe_dump(cluster))
    with pytest.raises(UserError, match=said):
        pipeline.plan(Site.load(str(store / "bad.yaml")), "bad", dry_run=True)


class Cancelled:
    """A scheduler that cancelled the waiting run's job itself (Slurm's --kill-on-invalid-dep, LSF's -ti)."""

    name, accounting_name = "slurm", "sacct"

    def state(self, job_id, run_dir=None):
        return {"state": State.CANCELLED}

    def accounting(self, job_id):
        return {"state": State.CANCELLED, "exit_code": "0:0", "nodes": "", "said": "sacct: CANCELLED"}


def test_a_run_cancelled_by_its_scheduler_names_the_run_it_waited_on(store):
    failed = earlier_run(store / "runs", "stage1", 1)
    waiting = earlier_run(store / "runs", "stage2")
    assert ending.run_state(Cancelled(), "9", waiting)["ended_by"].startswith("cancelled outside run-cluster")
    manifest = json.loads((waiting / "manifest.json").read_text())
    manifest["after"] = [Waited("stage1", str(os.getpid()), str(failed)).record()]
    (waiting / "manifest.json").write_text(json.dumps(manifest))
    assert ending.run_state(Cancelled(), "9", waiting)["ended_by"] == ("cancelled: waited on run stage1, which "
                                                                        "ended FAILED")


def test_the_api_checks_and_dry_runs_a_pipeline_as_the_command_line_does(store):
    from conftest import run_cluster
    from cluster_train.host.api.pipeline import Pipeline

    assert Pipeline("ci-slurm", "seed001", overrides={"trainer.max_epochs": "x"}).check() == [
        "stage experts: config key 'trainer.max_epochs' = 'x' must be int",
        "stage fusion: config key 'trainer.max_epochs' = 'x' must be int"]
    dry = Pipeline("ci-slurm", "seed001", run_id="s").dry_run()
    shown = run_cluster("ci-slurm", "--pipeline", "seed001", "--run-id", "s", "--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert list(dry) == ["experts", "fusion"] and all(stage.script in shown.stdout for stage in dry.values())
    assert not any((store / "runs").iterdir())
