"""The examples of examples/api run as a user runs them (`python examples/api/X.py ...`, a process of its own) on the
test Slurm cluster and the LSF stand-in, at the smallest size: an API script submits runs, waits for them and reads
their results, on both schedulers. They are the runs that prove the sweeps' arrays (from test_sweeps.py), seed 001's
pipeline (from test_pipelines.py and test_experiments.py) and a requeued function (from test_functions.py): those
tests' assertions are here, on the examples' run directories, so no training runs twice."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster.test_sweeps import TINY as SWEEP_TINY, completed_elements
from conftest import ROOT, job_logs, manifest, release_requeued, run_cluster

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
EXAMPLES = ROOT / "examples" / "api"
PIPELINE_TINY = ["trainer.max_epochs=1", "data.batch_size=16", "trainer.limit_train_batches=5",
                 "trainer.limit_val_batches=2"]
FEW_BATCHES = ["trainer.limit_train_batches=10", "trainer.limit_val_batches=5"]  # seed 001's files, not accuracy
SEEDS = ["--seeds", "1", "2", "3", "--max-parallel", "2"]  # one element more than runs at once


def start(example: str, *args: str, cwd: Path = ROOT) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(EXAMPLES / example), *map(str, args)], cwd=cwd, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(example: subprocess.Popen, timeout_s: float = 900) -> str:
    """Its whole output, once it has exited 0."""
    out, err = example.communicate(timeout=timeout_s)
    assert example.returncode == 0, out[-3000:] + err[-3000:]
    return out


def line_of(example: subprocess.Popen, pattern: str) -> re.Match:
    """The first line it prints that matches `pattern` (read while it goes on)."""
    for line in example.stdout:
        found = re.fullmatch(pattern, line.rstrip("\n"))
        if found:
            return found
    raise AssertionError(f"no line {pattern!r}: {example.stderr.read()[-3000:]}")


def sets(*values: str) -> list:
    return [arg for value in values for arg in ("--set", value)]


def tiny(sizes: list) -> list:
    """test_sweeps.py's ["--set", "K=V", ...] as the values alone."""
    return sizes[1::2]


def assert_best_was_rerun(out: str) -> None:
    """The example's best run, by final_val_acc among the completed elements, was rerun with its seed and image."""
    best = Path(re.search(r"^best: (\S+) \(seed (\d)\)", out, re.M)[1])
    again = Path(re.search(r"^rerun: (\S+) COMPLETED", out, re.M)[1])
    elements = [Path(e["run_dir"]) for e in json.loads((best.parent / "sweep.json").read_text())["elements"]]
    accuracy = {e: json.loads((e / "results.json").read_text())["final_val_acc"] for e in elements}
    assert accuracy[best] == max(accuracy.values()), accuracy
    assert manifest(again)["rerun_of"] == manifest(best)["run_id"]
    assert manifest(again)["config"]["seed"] == manifest(best)["config"]["seed"]
    assert manifest(again)["image"]["sha256"] == manifest(best)["image"]["sha256"]


def test_the_seed_sweep_example_on_slurm_arrays_capped_at_two_and_split_at_the_array_limit(
        cpu_image, slurm_cluster, demo_data, runs_dir, tmp_path):
    """Three seeds on a cluster whose arrays hold two: an array of two at most two at once, then one of one that
    waits for it; status reads both arrays in one question each; the best run is rerun."""
    small = tmp_path / "ci-slurm.yaml"
    small.write_text((ROOT / "clusters" / "ci-slurm.yaml").read_text() + "max_array_size: 2\n")
    example = start("seed_sweep.py", small, "n1_gpu1", "demo", *SEEDS, *sets(f"data.root={demo_data}",
                                                                              *tiny(SWEEP_TINY)))
    sweep_dir = Path(line_of(example, r"sweep (\S+): 3 runs")[1])
    record = json.loads((sweep_dir / "sweep.json").read_text())
    first, second = [array["job_id"] for array in record["arrays"]]
    shown = subprocess.run(["scontrol", "show", "job", "-o", first], capture_output=True, text=True).stdout
    assert "ArrayTaskThrottle=2" in shown, shown
    assert f"#SBATCH --dependency=afterany:{first}\n" in (sweep_dir / "sweep.1.sh").read_text()
    assert [e["job_id"] for e in record["elements"]] == [f"{first}_0", f"{first}_1", f"{second}_0"]
    assert_best_was_rerun(finished(example))
    completed_elements(sweep_dir)
    table = run_cluster("status", sweep_dir).stdout
    assert table.startswith(f"{sweep_dir.name}: slurm arrays {first}, {second}, 3 runs"), table
    assert len(re.findall(r"^e\d .* COMPLETED +1 +[\d.]+ +best_", table, re.M)) == 3, table


def test_the_seed_sweep_example_on_lsf_is_one_array_through_the_standin(cpu_image, cluster_nodes, demo_data,
                                                                        runs_dir, lsf_path):
    out = finished(start("seed_sweep.py", "ci-lsf", "one_gpu", "demo", *SEEDS,
                         *sets(f"data.root={demo_data}", *tiny(SWEEP_TINY))))
    sweep_dir = Path(re.search(r"^sweep (\S+): 3 runs$", out, re.M)[1])
    record = completed_elements(sweep_dir)
    shown = subprocess.run(["bjobs", "-a", "-noheader", "-o", "jobid jobindex stat", record["array_job_id"]],
                           capture_output=True, text=True).stdout
    assert [line.split() for line in shown.splitlines()] == [[record["array_job_id"], str(i), "DONE"]
                                                            for i in range(1, 4)], shown
    assert_best_was_rerun(out)


def assert_ran_in_order(first: Path, then: Path) -> None:
    """`then` started only after `first` had ended (each run's own record of its segments, to the second)."""
    expert, fusion = segments.read(first), segments.read(then)
    assert expert and fusion and expert[-1].end <= fusion[0].start, (expert, fusion)


def assert_fusion_outputs(run_dir, arch, fusion):
    parts = run_dir / f"{arch}_fusions" / fusion
    for name in ("experts/expert_0.pth", "experts/expert_3.pth", "fusion/fusion_head.pth", "global/fusion_model.pth"):
        assert (parts / name).is_file(), f"{run_dir.name}: {name}"
    csv_log = run_dir / "csv_logs" / f"{arch}_fusions" / f"{arch}_{fusion}_training_log.csv"
    header = csv_log.read_text().splitlines()[0].split(",")
    assert {"loss", "accuracy", "experts_lr", "fusion_lr"} <= set(header), header


def stage_dirs(out: str) -> dict:
    """The example's "STAGE: RUN_DIR STATE" lines: each stage's run directory, every stage COMPLETED."""
    stages = dict(re.findall(r"^(\w+): (\S+) COMPLETED$", out, re.M))
    assert list(stages) == ["experts", "fusion"], out[-3000:]
    return {name: Path(path) for name, path in stages.items()}


def results_json(where: Path) -> dict:
    return json.loads((where / "results.json").read_text())


def printed_results(out: str, run_dir: Path, tasks: tuple = ()) -> None:
    """The example ends with fusion's results, as results.json holds them (a packed run's: each task's, by name)."""
    expected = {task: results_json(run_dir / task) for task in tasks} if tasks else results_json(run_dir)
    assert json.loads(out[out.index("\n{") + 1:]) == expected


def test_the_seed001_pipeline_example_on_lsf_trains_fusion_once_the_experts_have_completed(
        cpu_image, cluster_nodes, demo_data, runs_dir, lsf_path):
    out = finished(start("seed001_pipeline.py", "ci-lsf", *sets(f"data.root={demo_data}", *PIPELINE_TINY,
                                                                 "task_params.num_experts=2")))  # two fuse
    stages = stage_dirs(out)
    assert manifest(stages["fusion"])["after"][0]["run_id"] == manifest(stages["experts"])["run_id"]
    assert len(list((stages["experts"] / "checkpoints" / "resnet_cifar").glob("expert_*_best.pth"))) == 2
    assert (stages["fusion"] / "resnet_cifar_fusions" / "multiplicative" / "global" / "fusion_model.pth").is_file()
    assert_ran_in_order(stages["experts"], stages["fusion"])
    printed_results(out, stages["fusion"])


def test_the_seed001_pipeline_example_on_slurm_packs_four_architecture_fusion_pairs_side_by_side(
        cpu_image, slurm_cluster, demo_data, runs_dir):
    """ci-slurm's seed001: stage 1's experts, four architectures side by side, then, once they have COMPLETED, four
    (architecture, fusion) pairs, one per (fake) GPU, each with its own log prefix and outputs."""
    out = finished(start("seed001_pipeline.py", "ci-slurm", *sets(f"data.root={demo_data}", "trainer.max_epochs=1",
                                                                   "data.batch_size=16", *FEW_BATCHES)))
    stages = stage_dirs(out)
    for i, task in enumerate(("densenet", "resnet", "improved_wide_resnet", "resnext")):  # what stage 2 reads
        stage1 = stages["experts"] / f"task-{i}-{task}"
        assert (stage1 / "splits" / "fusion_holdout_indices.npy").is_file(), stage1
        assert len(list(stage1.glob("checkpoints/*/expert_*_best.pth"))) == 4, stage1
    stage1, stage2 = (segments.read(stages[name]) for name in ("experts", "fusion"))
    assert stage1[-1].how == "COMPLETED" and stage1[-1].end <= stage2[0].start, (stage1, stage2)
    log = job_logs(stages["fusion"])
    pairs = [("densenet_cifar", "multiplicative"), ("resnet_cifar", "multiplicativeAddition"),
             ("improved_wide_resnet", "TransformerBase"), ("resnext_cifar", "concatenation")]
    names = ["task-0-densenet-multiplicative", "task-1-resnet-multiplicativeAddition",
             "task-2-improved_wide_resnet-TransformerBase", "task-3-resnext-concatenation"]
    gpus = []
    for name, (arch, fusion) in zip(names, pairs):
        started = rf"^\[{name}\] \[cluster-train\] rank 0/1 on host n\d "  # whichever node was free once it could start
        gpus += re.findall(started + r".*CUDA_VISIBLE_DEVICES=(\S+)", log, re.M)
        assert_fusion_outputs(stages["fusion"] / name, arch, fusion)  # its own run directory
    assert len(gpus) == 4 and len(set(gpus)) == 4, f"one (fake) GPU per task, got {gpus}"
    # side by side: Slurm started all four steps before any of them ended (its accounting, so a container that is
    # slow to start on a loaded machine does not count against it)
    job = manifest(stages["fusion"])["scheduler"]["job_id"]
    steps = subprocess.run(["sacct", "-j", job, "-n", "-P", "-o", "JobID,Start,End"], capture_output=True,
                           text=True).stdout.split()
    times = [line.split("|")[1:] for line in steps if re.fullmatch(rf"{job}\.[0-3]", line.split("|")[0])]
    assert len(times) == 4 and max(start for start, _ in times) < min(end for _, end in times), steps
    printed_results(out, stages["fusion"], tuple(names))


def test_the_function_example_on_slurm_returns_a_value_and_a_requeued_call_goes_on_from_its_checkpoint(
        cpu_image, slurm_cluster, runs_dir):
    """Its counting call, warned with USR1 (what --signal=B:USR1@N delivers), saves its next call through the
    checkpoint hook, is requeued and finishes from where it was."""
    example = start("function_call.py", "ci-slurm", "n1_gpu1", "--count", "40", cwd=EXAMPLES)  # 4 s of counting
    line_of(example, r"square\(7\) = 49")  # its value back, in its own job
    run_dir = Path(line_of(example, r"counting: (\S+)")[1])
    job_id = manifest(run_dir)["scheduler"]["job_id"]
    deadline = time.time() + 300
    while "counted 10" not in job_logs(run_dir):
        assert time.time() < deadline, job_logs(run_dir)[-3000:]
        time.sleep(0.5)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True)
    while example.poll() is None:
        assert time.time() < deadline, job_logs(run_dir)[-3000:]
        release_requeued(job_id)
        time.sleep(1)
    out = finished(example, 10)
    assert "counted to 40 in 2 segment(s)" in out, out + job_logs(run_dir)[-3000:]  # the saved object went on
    assert "checkpoint saved (REQUEUED)" in job_logs(run_dir)


def test_the_function_example_on_lsf_returns_its_values(cpu_image, cluster_nodes, runs_dir, lsf_path):
    out = finished(start("function_call.py", "ci-lsf", "one_gpu", "--count", "5", cwd=EXAMPLES), 600)
    assert "square(7) = 49" in out and "counted to 5 in 1 segment(s)" in out, out
