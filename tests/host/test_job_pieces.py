"""The ResolvedJob in typed pieces (what runs, where it runs, the image...) and each scheduler spelling the adapters decide
from them, in Python: no template, no scheduler, no image."""
import os
import subprocess

import pytest

from cluster_train.host.scheduling.job import DataImage, Fabric, ImageRef, ResolvedJob, Notify, Placement, Task, Work
from cluster_train.host.jobs.preflight import directives_repeated
from cluster_train.host.schedulers import adapter
from cluster_train.host.schedulers.lsf import Lsf, gpu_option, per_slot_gb
from cluster_train.host.schedulers.slurm import Slurm, gpu_options, memory_options

# ResolvedJob.as_dict's keys as manifests on disk hold them (before the ResolvedJob was split): rerun, resume, status and report read
# them back, so they must not change
MANIFEST_KEYS = {
    "run_id", "cluster", "cluster_file", "profile", "scheduler", "partition", "queue", "nodes", "gpus_per_node",
    "ranks_per_node", "tasks_per_node", "cpus_per_task", "mem_gb", "time", "launch", "job_name", "run_dir",
    "config_path", "log_path", "image", "image_sha256", "image_flavor", "data_dir", "nv", "min_driver",
    "check_fabric", "binds", "env", "credentials", "directives", "modules", "module_init", "fabric", "fabric_paths",
    "fabric_library_path", "image_registry", "image_signed_from", "image_parent_sha256", "signing", "gpu_type",
    "gpu_request", "gpu_mem_gb", "mem_per_gpu_gb", "mem_per_cpu_gb", "whole_node", "node_mem_gb", "cpu_bind", "hint",
    "qos", "constraint", "reservation", "exclusive", "account", "email", "notify", "grace_s", "max_requeues", "tasks",
    "hang_timeout_s", "max_failures", "spare_nodes",
    "data_image", "data_sha256", "data_name", "data_size", "data_stage", "data_stage_required", "entry", "share_mount",
    "time_s", "partition_max_s", "qos_max_s",  # added (issue 57): the time limits in seconds, parsed once
}


def place(**given) -> Placement:
    return Placement(**{"partition": "gpu", "queue": "gpu", "nodes": 1, "gpus_per_node": 0, "tasks_per_node": 1,
                        "cpus_per_task": 4, "mem_gb": None, "time": "01:00:00", **given})


def job(placement: Placement, scheduler: str = "slurm", **work) -> ResolvedJob:
    return ResolvedJob(run_id="r1", cluster="c", cluster_file="c.yaml", profile="p", scheduler=scheduler, job_name="demo",
               adapter=adapter(scheduler),
               work=Work(**{"entry": "fit", "launch": "srun", "ranks_per_node": 1, "run_dir": "/runs/r1",
                            "config_path": "/runs/r1/config.yaml", "log_path": "/runs/r1/logs/demo_%J.out",
                            "data_dir": "/data", **work}),
               placement=placement, image=ImageRef(path="/i.sif", sha256="ab", flavor="cpu", nv=False, min_driver=""))


@pytest.mark.parametrize("request_word, expected", [
    ("count", "--gpus-per-node=2"), ("typed", "--gpus-per-node=a100:2"), ("gres", "--gres=gpu:2"),
    ("typed-gres", "--gres=gpu:a100:2"),
])
def test_slurm_asks_for_gpus_as_the_partition_says(request_word, expected):
    assert gpu_options(place(gpus_per_node=2, gpu_type="a100", gpu_request=request_word)) == [expected]
    assert gpu_options(place(gpus_per_node=0, gpu_request=request_word)) == []


@pytest.mark.parametrize("given, expected", [
    (dict(whole_node=True, mem_gb=256), ["--mem=0"]), (dict(mem_per_gpu_gb=8, mem_gb=32), ["--mem-per-gpu=8G"]),
    (dict(mem_per_cpu_gb=2, mem_gb=32), ["--mem-per-cpu=2G"]), (dict(mem_gb=32), ["--mem=32G"]),
    (dict(mem_gb=None), []),
])
def test_slurm_spells_memory_as_the_profile_gives_it(given, expected):
    assert memory_options(place(**given)) == expected


def test_packed_slurm_tasks_each_ask_for_their_share_of_the_memory():
    tasks = [Task(f"task-{i}", f"/runs/r1/task-{i}", "") for i in range(4)]
    packed = job(place(gpus_per_node=4, tasks_per_node=4, mem_gb=30, cpu_bind="cores"), tasks=tasks)
    assert Slurm().task_step(packed) == ["--exact", "--ntasks=1", "--nodes=1", "--gpus-per-node=1", "--mem=7680M",
                                         "--cpus-per-task=4", "--kill-on-bad-exit=1", "--cpu-bind=cores"]
    assert tasks[0].results_path == "/runs/r1/task-0/results.json"


def test_slurm_header_leaves_out_what_the_site_defaults_and_ends_with_the_profiles_own():
    options = Slurm().directives(job(place(queue="", constraint="a100 & ib", directives=["--comment=x"])))
    assert options[:3] == ["--job-name=demo", "--constraint=a100&ib", "--nodes=1"]
    assert not [o for o in options if o.startswith(("--partition", "--mem", "--gpus", "--mail"))]
    assert options[-1] == "--comment=x"


@pytest.mark.parametrize("node_gb, slots, expected", [(32, 8, "4"), (10, 4, "2.5"), (10, 3, "3.3"), (1, 16, "0.1")])
def test_lsf_reserves_memory_per_slot(node_gb, slots, expected):
    assert per_slot_gb(node_gb, slots) == expected


def test_lsf_header_counts_slots_spans_hosts_and_rounds_the_warning_up_to_minutes():
    two_hosts = job(place(nodes=2, tasks_per_node=2, cpus_per_task=4, mem_gb=32, grace_s=301, gpus_per_node=2,
                          gpu_type="a100", gpu_request="typed", gpu_mem_gb=40), scheduler="lsf")
    options = Lsf().directives(two_hosts)
    assert "-n 16" in options and '-R "rusage[mem=4GB]"' in options and '-R "span[ptile=8]"' in options
    assert '-gpu "num=2:mode=exclusive_process:gmodel=a100:gmem=40G"' in options
    assert options[-5:] == ["-o /runs/r1/logs/demo_%J.out", "-e /runs/r1/logs/demo_%J.err", "-wa USR1", "-wt 6",
                            "-r"]  # rerunnable: LSF reruns it when an execution host fails
    assert '-R "span[hosts=1]"' in Lsf().directives(job(place(), scheduler="lsf"))
    assert gpu_option(place(gpus_per_node=1, gpu_type="a100", gpu_request="count")) == [
        '-gpu "num=1:mode=exclusive_process"']


def test_a_raw_directive_repeating_a_key_is_refused_from_the_adapters_list_without_a_script():
    repeated = job(place(directives=["-t 30", "--comment=x"]))
    assert [str(e) for e in directives_repeated(repeated)] == [
        "profile 'p': directive '-t 30' repeats time, which the script already sets; remove it from directives and "
        "set time instead"]
    assert directives_repeated(job(place(directives=["--comment=x"]))) == []


# every typed value that adds, drops or respells one of the header's options
OWNED_CASES = [dict(), dict(queue="", constraint="a100 & ib"), dict(account="acct", qos="high", reservation="r1"),
               dict(exclusive=True, hint="nomultithread", gpus_per_node=2, gpu_type="a100", gpu_request="typed-gres"),
               dict(gpus_per_node=4, gpu_request="count", mem_per_gpu_gb=8, mem_gb=32), dict(mem_per_cpu_gb=2),
               dict(whole_node=True, mem_gb=256), dict(mem_gb=0), dict(nodes=2, tasks_per_node=2, mem_gb=64)]


@pytest.mark.parametrize("scheduler", ["slurm", "lsf"])
@pytest.mark.parametrize("notify", [Notify(), Notify(wanted=True), Notify(wanted=True, email="a@b.c")])
@pytest.mark.parametrize("given", OWNED_CASES)
def test_the_options_an_adapter_owns_are_the_ones_its_header_renders(scheduler, notify, given):
    """preflight compares raw directives with owned_options(), never with the rendered header: the two lists the
    adapter keeps of one header must name the same options, in order."""
    resolved = job(place(**given), scheduler=scheduler)
    resolved.notify = notify
    scheduler_ = resolved.adapter
    assert scheduler_.owned_options(resolved) == [scheduler_.option(o) for o in scheduler_.directives(resolved)]


def test_the_manifest_keeps_the_flat_keys_runs_on_disk_hold():
    whole = job(place(), tasks=[Task("task-0", "/runs/r1/task-0", "/runs/r1/task-0/config.yaml")])
    whole.fabric = Fabric(check=True, name="infiniband")
    whole.notify = Notify(wanted=True, email="a@b.c")
    whole.data = DataImage(path="/d.sqsh", sha256="cd", name="ufc10", size=3, stage="$TMPDIR", stage_required=True)
    record = whole.as_dict()
    assert set(record) == MANIFEST_KEYS
    assert (record["image"], record["image_sha256"], record["check_fabric"], record["fabric"], record["notify"],
            record["email"], record["data_image"], record["data_stage"], record["partition"], record["run_dir"]) == (
        "/i.sif", "ab", True, "infiniband", True, "a@b.c", "/d.sqsh", "$TMPDIR", "gpu", "/runs/r1")
    assert record["tasks"] == [{"name": "task-0", "run_dir": "/runs/r1/task-0",
                                "config_path": "/runs/r1/task-0/config.yaml"}]
    assert record["signing"] == {"required": False, "signers": (), "source": ""}


@pytest.mark.parametrize("work, shares", [
    ({"launch": "srun", "ranks_per_node": 2, "share_mount": True}, True),  # the trainer's srun ranks of one node
    ({"launch": "srun", "ranks_per_node": 2, "share_mount": False}, False),  # the profile says no
    ({"launch": "srun", "ranks_per_node": 2, "share_mount": True, "entry": "command"}, False),  # warned by a signal
    ({"launch": "blaunch", "ranks_per_node": 2, "share_mount": True}, False),  # a parent per rank
    ({"launch": "srun", "ranks_per_node": 1, "share_mount": True}, False),  # nothing to share
])
def test_a_nodes_ranks_share_one_container_only_where_the_warning_needs_no_signal(work, shares):
    assert job(place(), **work).work.shares_mount is shares


@pytest.mark.parametrize("hostfile, said", [(None, "[]\n"), ("", "[]\n"),
                                            ("hA\nhB\nhB\n", "[hB\tbhosts: unavail]\nrequeued\n")])
def test_lsf_names_a_failed_host_only_from_the_jobs_own_host_file(tmp_path, hostfile, said):
    """Without $LSB_DJOB_HOSTFILE, or with it empty, `bhosts -w` of no host lists the whole cluster's: another job's
    unavailable host is not this job's failure (and under set -u the unset variable is no error)."""
    from cluster_train.host.schedulers.lsf_failures import FAILED_NODES, REQUEUED_UNDER_US

    (tmp_path / "bhosts").write_text('#!/bin/bash\necho "HOST_NAME STATUS"\nfor h in hA hB; do\n'
                                     '  [ "$h" = hB ] && echo "hB unavail" || echo "hA ok"\ndone\n')
    (tmp_path / "bhosts").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    env.pop("LSB_DJOB_HOSTFILE", None)
    if hostfile is not None:
        (tmp_path / "hostfile").write_text(hostfile)
        env["LSB_DJOB_HOSTFILE"] = str(tmp_path / "hostfile")
    done = subprocess.run(["bash", "-c", f'set -euo pipefail; failed=$({FAILED_NODES}) || true; echo "[$failed]"; '
                                         f'if {REQUEUED_UNDER_US}; then echo requeued; fi'],
                          env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, said, ""), done
