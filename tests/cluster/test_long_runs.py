"""Runs longer than one allocation, on the real test Slurm cluster and through the LSF stand-in, inside the image:
each segment is warned, every rank saves, the job requeues itself, and the run finishes on its own with the same
metrics.csv and weights, bit for bit, as an uninterrupted run of the same config and shape (one rank and two DDP
ranks; the stops fall mid-epoch). The same runs carry the experiment trackers: one MLflow run on a real server, logged
online from the Slurm nodes or sent by `sync` after an offline LSF run; one W&B offline directory (W&B's own reader
reads its log as one run); every step once, and no credential value in their run directories.

The test asks for the segments it proves, whatever the machine's speed: it sends each job the scheduler's own warning
(`scancel --batch --signal=USR1`, `bkill -s USR1`: what `--signal=B:USR1@N` and `-wa USR1` deliver) once the
segment has trained an epoch, twice, and then lets the run finish. That the time limit itself sends the warning is
proven by tests/cluster/test_lsf_requeue.py and, below, by a plain bash job (to its batch shell, and how early) and by
your own code, each under a real two-minute limit beside the long runs (Slurm's limits are whole minutes and its signal
timing has up to 60 s of jitter: a minute or two that need not be waited for again)."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (assert_same_tensors, job_logs, manifest, mlflow_up, release_requeued, run_cluster,
                      wandb_records)

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
EPOCHS = 4
REQUEUES = 2  # the segments proven: two requeues, then the end
ENDED = ("COMPLETED", "FAILED", "TIMEOUT")
WARN = {"slurm": ["scancel", "--batch", "--signal=USR1"], "lsf": ["bkill", "-s", "USR1"]}
LIMIT_S, LEAD_S = 120, 50  # the plain batch job's time limit and the warning lead it asks for


# The trackers ride on three of the requeued runs: MLflow online from the Slurm nodes to a real server (through
# mlflow_for_nodes' relay: the nodes have their own network); MLflow offline through the LSF stand-in, then `sync`
# from this login node; W&B offline on the DDP run. Canary credentials are in the submitting environment of all
# three, and must be nowhere in their run directories.
CANARIES = {"MLFLOW_TRACKING_TOKEN": "canary-mlflow-4f1d2c9e8b7a", "WANDB_API_KEY": "c4nary" + "0" * 34}
TRACKED = {"ci-slurm": "{use: [tensorboard, mlflow], experiment: long-runs-online, mlflow_uri: %s}",
           "ci-lsf": "{use: [mlflow], offline: true, experiment: long-runs-synced, mlflow_uri: %s}",
           "ci-slurm-ddp": "{use: [wandb], offline: true, experiment: long-runs}"}


def config(demo_data, strategy):
    return ["demo", "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
            "--set", f"trainer.max_epochs={EPOCHS}", "--set", f"trainer.strategy={strategy}", "--no-wait"]


def tracker_args(name: str, mlflow_uri: str) -> list:
    return ["--set", "tracker=" + TRACKED[name].replace("%s", mlflow_uri)] if name in TRACKED else []


def csv_steps(run_dir: Path, column: str) -> list:
    """The steps at which metrics.csv holds `column`: what every logger of the run was given."""
    import csv

    with (run_dir / "metrics.csv").open() as f:
        return sorted({int(row["step"]) for row in csv.DictReader(f) if row.get(column)})


def logged_online(run_dir: Path, server: str) -> None:
    """Each segment logged straight to the server, into the one run the first segment created."""
    status = run_cluster("status", run_dir).stdout
    assert "tracker mlflow: run " in status and "), logged online" in status, status
    one_mlflow_run(run_dir, server, "long-runs-online")


def synced_to_one_mlflow_run(run_dir: Path, server: str) -> None:
    """`sync` sends the offline run to the server as one run."""
    assert "not synced: run-cluster sync" in run_cluster("status", run_dir).stdout
    done = run_cluster("sync", run_dir)
    assert done.returncode == 0 and "new metric point(s)" in done.stdout, done.stdout + done.stderr
    status = run_cluster("status", run_dir).stdout
    assert "tracker mlflow: run " in status and "), synced 20" in status, status
    one_mlflow_run(run_dir, server, "long-runs-synced")


def one_mlflow_run(run_dir: Path, server: str, experiment: str) -> None:
    """One run on the server for the requeued run: every step metrics.csv has, once; params, digests, segments."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server)
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    for metric in ("train/loss", "val/loss"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
        assert sorted(set(steps)) == csv_steps(run_dir, metric), (metric, steps)
        assert metric != "train/loss" or len(steps) == len(set(steps)), steps  # no step logged twice
    assert len(set(csv_steps(run_dir, "val/loss"))) >= EPOCHS
    tags, image = run.data.tags, manifest(run_dir)["image"]["sha256"]
    assert tags["ct.image_sha256"] == image and tags["ct.run_id"] == run_dir.name and tags["ct.code_commit"]
    assert {f"ct.segment.{n}" for n in range(1, REQUEUES + 2)} <= set(tags), sorted(tags)
    assert run.data.params["trainer/max_epochs"] == str(EPOCHS) and run.info.status == "FINISHED"


def one_wandb_run_with_continuous_steps(run_dir: Path) -> None:
    """One offline directory for the three segments (each process start wrote its own; the job folded them), whose
    log W&B's own reader reads as one run: one start, one end, every step once and in order, W&B's step the
    trainer's; `wandb sync` takes it."""
    state = json.loads((run_dir / "trackers.json").read_text())["wandb"]
    (folded,) = (run_dir / "wandb").glob("offline-run-*")
    parts = list((folded / "segments").glob("*.wandb"))  # each segment's own log, kept
    assert folded.name.endswith(f"-{state['id']}") and len(parts) == REQUEUES + 1, (folded, parts)
    records = wandb_records(folded)
    kinds = [r["type"] for r in records]
    assert kinds.count("run") == kinds.count("exit") == 1 and kinds[-1] == "exit", kinds
    items = [r["history"]["item"] for r in records if "train/loss" in r.get("history", {}).get("item", {})]
    assert all(i["_step"] == i["trainer/global_step"] for i in items), items[:3]  # W&B's own step goes on too
    assert [i["_step"] for i in items] == csv_steps(run_dir, "train/loss"), items  # every logged step, once, in order
    dry = subprocess.run([str(Path(sys.executable).parent / "wandb"), "sync", "--dry-run", str(folded)],
                         capture_output=True, text=True)  # the client's own command takes it
    assert "Would sync 1 run(s)" in dry.stdout + dry.stderr, dry.stdout + dry.stderr


def no_canary_under(*run_dirs: Path) -> None:
    """The job forwarded the credentials by name (so rank 0 had them), and no file of the run holds a value."""
    for run_dir in run_dirs:
        assert set(CANARIES) & set(re.findall(r"[A-Z_]+", (run_dir / "job.sh").read_text())), run_dir
        for path in run_dir.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                leaked = [name for name, value in CANARIES.items() if value.encode() in data]
                assert not leaked, f"{path} holds the value of {leaked}"


def epochs_logged(run_dir: Path) -> int:
    return len(re.findall(r"\[cluster-train\] epoch \d+/", job_logs(run_dir)))


def warned_until_ended(runs: dict, timeout_s: float, mounts: dict) -> dict:
    """runs: name -> (run directory, scheduler, job id, requeues to ask for). Each run's segments once it ended.
    mounts: name -> the set of its live ranks' mount namespaces at each look (mount_namespaces), filled in."""
    warned = {name: [] for name in runs}  # epochs logged when each warning was sent
    ended = {}
    deadline = time.time() + timeout_s
    while len(ended) < len(runs) and time.time() < deadline:
        for name, (run_dir, scheduler, job_id, requeues) in runs.items():
            found = segments.read(run_dir)
            if name in mounts:
                mounts[name].append(mount_namespaces(run_dir))
            if name in ended or not found:
                continue
            if found[-1].how in ENDED:
                ended[name] = found
            elif scheduler == "slurm":
                release_requeued(job_id)
            trained = epochs_logged(run_dir)
            if (len(warned[name]) < requeues and len(found) == len(warned[name]) + 1 and not found[-1].how
                    and trained > (warned[name] or [0])[-1]):  # this segment trained an epoch: warn it, once
                subprocess.run([*WARN[scheduler], job_id], capture_output=True)
                warned[name].append(trained)
        time.sleep(0.5)
    missing = {name: segments.read(runs[name][0]) for name in runs if name not in ended}
    assert not missing, (f"not ended in {timeout_s} s: {missing}\n"
                         + "".join(job_logs(r[0])[-2000:] for r in runs.values()))
    return ended


def mount_namespaces(run_dir: Path) -> list:
    """The mount namespace of each of the run's ranks that is training now, from the PIDs of their progress files (the
    test nodes share this machine's PIDs): one for the ranks of a node that share one container, one per rank if not."""
    found = []
    for path in (run_dir / "logs" / "progress").glob("rank-[0-9]"):
        try:
            pid = path.read_text().split()[5]
            if b"train" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(os.readlink(f"/proc/{pid}/ns/mnt"))
        except (OSError, IndexError):
            pass  # no line yet, or the rank has ended
    return found


def one_container_for_both_ranks(mounts: list) -> None:
    """The warned DDP run's two ranks on one node were seen training in one container (--sharens): one mount
    namespace, not this machine's. (Not at every look: one CI run once saw two, at most a segment's worth, since
    Apptainer's first-container election by a lock file in /dev/shm can race, or a look mixes two segments' PIDs.)"""
    shared = {frozenset(seen) for seen in mounts if len(seen) == 2 and len(set(seen)) == 1}
    assert shared, mounts
    assert os.readlink("/proc/self/ns/mnt") not in set().union(*shared)


def assert_resumed_to_the_same_result(long_dir: Path, reference: Path, found: list) -> None:
    log = job_logs(long_dir)
    assert len(found) >= 3 and [s.how for s in found[:-1]] == ["REQUEUED"] * (len(found) - 1), (found, log[-3000:])
    assert found[-1].how == "COMPLETED", log[-3000:]
    resumed = [r for s in found[1:] for r in s.resumed]
    assert resumed and all(r["resumed_step"] for r in resumed), resumed  # every later segment went on from a step
    per_epoch = int(re.search(r"\[cluster-train\] epoch 1/\d+ step (\d+)", log).group(1))
    stops = [int(step) for step in re.findall(r"stop requested \(\S+\): saved .* at step (\d+)", log)]
    assert len(stops) >= REQUEUES and all(step % per_epoch for step in stops), (stops, per_epoch)  # mid-epoch
    long, ref = (json.loads((d / "results.json").read_text()) for d in (long_dir, reference))
    assert long["epochs"] == ref["epochs"] == EPOCHS
    assert (long_dir / "metrics.csv").read_text() == (reference / "metrics.csv").read_text()
    for name in ("models/resnet_cifar_best_weights.pth", "checkpoints/last.ckpt"):
        assert_same_tensors(long_dir / name, reference / name)
    status = run_cluster("status", long_dir)
    assert status.returncode == 0 and "segment 2:" in status.stdout and "result:" in status.stdout, status.stdout
    assert len(manifest(long_dir)["segments"]) == len(found)
    # what it trained on, in the results and (status copies it) the manifest: no GPU, no CUDA, no driver here
    assert manifest(long_dir)["gpu"] == {k: long[k] for k in ("gpu", "cuda", "driver")} == dict.fromkeys(
        ("gpu", "cuda", "driver"))
    # and how: precision auto is 32-bit on the CPU; the input wait of the last segment's rank 0
    assert manifest(long_dir)["speed"]["precision"] == long["precision"] == "32-true"
    assert f"waited for data {long['input']['wait_fraction']:.0%}" in status.stdout, status.stdout
    assert_cost_recorded(long_dir, status.stdout, found)


def assert_cost_recorded(run_dir: Path, said: str, found: list) -> None:
    """Issue 46: status records what the run cost: on Slurm the GPU-hours sacct has (every allocation of the requeued
    job, elapsed x its GPUs), elsewhere the segments' own times; each segment's queue wait and each requeue's lost
    steps."""
    recorded = manifest(run_dir)
    cost = recorded["cost"]
    assert [s["segment"] for s in cost["segments"]] == [s.number for s in found], cost
    assert all(isinstance(s["queue_wait_s"], int) for s in cost["segments"]), cost
    assert all(isinstance(s["lost_steps"], int) for s in cost["segments"][1:]), cost
    if recorded["scheduler"]["name"] == "slurm":
        done = subprocess.run(["sacct", "-j", recorded["scheduler"]["job_id"], "--duplicates", "-X", "-n", "-P", "-o",
                               "ElapsedRaw,AllocTRES"], capture_output=True, text=True, check=True)
        allocations = [line.split("|") for line in done.stdout.splitlines()]
        held = sum(int(e) * int(re.search(r"gres/gpu=(\d+)", t)[1]) for e, t in allocations) / 3600
        assert len(allocations) == len(found) and cost["source"] == "sacct", (allocations, cost)
        assert cost["gpu_hours"] == round(held, 4), (cost, allocations)
    else:
        assert cost["source"] == "the run's segments" and cost["gpu_hours"] > 0, cost
    assert f"cost: {cost['gpu_hours']:.4f} GPU-hours on {cost['gpus']} GPU(s)" in said, said


# The Lightning example (examples/lightning_smart) with ~80 s of training under requeue_1x1's 2-minute limit.
LIGHTNING = Path(__file__).resolve().parents[2] / "examples" / "lightning_smart" / "experiment.yaml"
LIGHTNING_LONG = ["--", "python", "train.py", "--config", "configs/train/requeue_1x1.yaml"]


def own_code_saved_on_the_warning_and_resumed(run_dir: Path, found: list) -> None:
    """Your own code: the warning reached it in the container, it saved where CT_CHECKPOINT_DIR said and exited with
    CT_REQUEUE_EXIT; the job requeued and the next segment resumed from that checkpoint to the end."""
    log = job_logs(run_dir)
    assert found[0].how == "REQUEUED" and found[-1].how == "COMPLETED", (found, log[-3000:])
    assert "asking for a requeue" in log and f"resuming from {run_dir}/checkpoints/last.ckpt" in log, log[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs"] == 30 and metrics["resumed_from"] == f"{run_dir}/checkpoints/last.ckpt"


@pytest.fixture(scope="module")
def time_limit_job(slurm_cluster, tmp_path_factory):
    """A plain bash job under a real time limit, asking for USR1 LEAD_S before it; it writes its own record (the
    cluster forgets finished jobs a few seconds after they end, MinJobAge). Submitted before the long runs."""
    out = tmp_path_factory.mktemp("time-limit") / "job.out"
    script = ("#!/bin/bash\n"
              'echo "start $(date +%s.%N)"\n'
              'trap \'echo "usr1 $(date +%s.%N)"; echo "end 0"; exit 0\' USR1\n'
              "sleep 300 & wait\n")
    # A 2-minute limit, so that the asked-for lead (50 s) plus Slurm's early margin (up to 60 s) stays inside it: with
    # a 1-minute limit any lead would be sent at the job's first time-limit check and no wrong @N could be told.
    done = subprocess.run(["sbatch", "--parsable", "-p", "ci", f"--time={LIMIT_S // 60}", f"--signal=B:USR1@{LEAD_S}",
                           "--requeue", "--open-mode=append", "-o", str(out)], input=script, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    yield job_id, out
    subprocess.run(["scancel", job_id], capture_output=True)  # a failed test leaves no job behind


def test_runs_longer_than_one_allocation_requeue_themselves_and_complete(time_limit_job, cpu_image, slurm_cluster,
                                                                        demo_data, runs_dir, lsf_path,
                                                                        mlflow_for_nodes):
    """Slurm (one rank and two DDP ranks) and the LSF stand-in warned twice each, your own code under a real
    two-minute limit, and the uninterrupted references on the same shapes, all side by side (and the plain time-limit
    job, time_limit_job, submitted first, waits out its warning beside them)."""
    submitted, server = {}, mlflow_up(mlflow_for_nodes)  # the online run's first segment logs at once
    for name, cluster, profile, args in (("reference", "ci-slurm", "n1_gpu1", config(demo_data, "single")),
                                         ("reference-ddp", "ci-slurm", "n1_gpu2", config(demo_data, "ddp")),
                                         ("ci-slurm", "ci-slurm", "n1_gpu1", config(demo_data, "single")),
                                         ("ci-slurm-ddp", "ci-slurm", "n1_gpu2", config(demo_data, "ddp")),
                                         ("ci-lsf", "ci-lsf", "one_gpu", config(demo_data, "single")),
                                         ("own-code", "ci-slurm", "requeue_1x1", [LIGHTNING, "--no-wait"])):
        done = run_cluster(cluster, profile, *args, "--run-id", name, *tracker_args(name, server),
                           *(LIGHTNING_LONG * (name == "own-code")), env={**os.environ, **CANARIES})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        submitted[name] = manifest(runs_dir / name)["scheduler"]
    runs = {name: (runs_dir / name, job["name"], job["job_id"], REQUEUES if name.startswith("ci-") else 0)
            for name, job in submitted.items()}
    try:
        mounts = {"ci-slurm-ddp": []}
        found = warned_until_ended(runs, 900, mounts)
    finally:  # a failed test leaves no job requeueing itself behind
        subprocess.run(["scancel", *(job["job_id"] for job in submitted.values() if job["name"] == "slurm")],
                       capture_output=True)
        subprocess.run(["bkill", submitted["ci-lsf"]["job_id"]], capture_output=True)
    for name, reference in (("ci-slurm", "reference"), ("ci-slurm-ddp", "reference-ddp"), ("ci-lsf", "reference")):
        assert len(found[name]) == REQUEUES + 1, found[name]
        assert_resumed_to_the_same_result(runs_dir / name, runs_dir / reference, found[name])
    logged_online(runs_dir / "ci-slurm", server)
    synced_to_one_mlflow_run(runs_dir / "ci-lsf", server)
    one_wandb_run_with_continuous_steps(runs_dir / "ci-slurm-ddp")
    one_container_for_both_ranks(mounts["ci-slurm-ddp"])
    no_canary_under(*(runs_dir / name for name in TRACKED))
    own_code_saved_on_the_warning_and_resumed(runs_dir / "own-code", found["own-code"])
    slurm_job, lsf_job = submitted["ci-slurm"]["job_id"], submitted["ci-lsf"]["job_id"]
    assert {s.job_id for s in found["ci-slurm"]} == {slurm_job}  # a requeued job keeps its id
    log = (runs_dir / "ci-slurm" / "logs" / f"job-{slurm_job}.out").read_text()
    assert re.search(r"stop requested \(SIGUSR1\): saved .* at step \d+", log), log[-3000:]
    bhist = subprocess.run(["bhist", "-l", lsf_job], capture_output=True, text=True)
    assert bhist.stdout.lower().count("requeued") >= REQUEUES, bhist.stdout


def test_time_limit_signal_reaches_the_batch_shell(time_limit_job):
    job_id, out = time_limit_job
    deadline = time.time() + LIMIT_S + 30
    while not ("end 0" in lines(out) and lines(out)):
        assert time.time() < deadline, f"USR1 in the batch shell: not within {LIMIT_S + 30} s"
        release_requeued(job_id)  # a requeued job need not sit out Slurm's 120 s BeginTime here
        time.sleep(1)  # the job times its own signal: the poll only waits for the record
    lead = LIMIT_S - signal_after_start(lines(out))
    print(f"signal lead time before the {LIMIT_S} s limit: {lead:.1f} s (asked for {LEAD_S} s)")
    # Slurm checks time limits every 30 s: the signal comes up to 60 s earlier than asked (its manual) and was seen
    # up to 30 s later (tests/slurm notes); an @N outside that window, or no signal, fails
    assert LEAD_S - 30 <= lead <= LEAD_S + 60, lead


def signal_after_start(record: list) -> float:
    """Seconds from the (last) start to the USR1 in the job's record; Slurm's own lines in the same file (a
    slurmstepd error, a requeued job's second start) are not the job's words."""
    start = None
    for words in map(str.split, record):
        if words[:1] == ["start"]:
            start = float(words[1])
        elif words[:1] == ["usr1"] and start is not None:
            return float(words[1]) - start
    raise AssertionError(f"no start then usr1 in the job's record: {record}")


def lines(path: Path) -> list:
    return path.read_text().splitlines() if path.exists() else []
