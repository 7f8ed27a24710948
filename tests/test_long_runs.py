"""Runs longer than one allocation, on the real test Slurm cluster and through the LSF stand-in, inside the image:
each segment is warned, every rank saves, the job requeues itself, and the run finishes on its own with the same
metrics.csv and weights, bit for bit, as an uninterrupted run of the same config and shape (one rank and two DDP
ranks; the stops fall mid-epoch). The same runs carry the experiment trackers: one MLflow run on a real server after
`sync`, one W&B run offline, both with every step once, and no credential value in their run directories.

The test asks for the segments it proves, whatever the machine's speed: it sends each job the scheduler's own warning
(`scancel --batch --signal=USR1`, `bkill -s USR1`: what `--signal=B:USR1@N` and `-wa USR1` deliver) once the
segment has trained an epoch, twice, and then lets the run finish. That the time limit itself sends the warning is
proven by tests/test_slurm_requeue.py and tests/test_lsf_requeue.py, and here by your own code below, which runs under
a real two-minute limit."""
import json
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_same_tensors, job_logs, manifest, mlflow_up, release_requeued, run_cluster

from train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
EPOCHS = 4
REQUEUES = 2  # the segments proven: two requeues, then the end
ENDED = ("COMPLETED", "FAILED", "TIMEOUT")
WARN = {"slurm": ["scancel", "--batch", "--signal=USR1"], "lsf": ["bkill", "-s", "USR1"]}


# The trackers ride on two of the requeued runs: MLflow offline (the nodes, on their own network, cannot reach a
# server on 127.0.0.1) then `sync` from this login node to a real server; W&B offline. Canary credentials are in the
# submitting environment of both, and must be nowhere in their run directories.
CANARIES = {"MLFLOW_TRACKING_TOKEN": "canary-mlflow-4f1d2c9e8b7a", "WANDB_API_KEY": "c4nary" + "0" * 34}
TRACKED = {"ci-slurm": "{use: [tensorboard, mlflow], offline: true, experiment: long-runs, mlflow_uri: %s}",
           "ci-slurm-ddp": "{use: [wandb], offline: true, experiment: long-runs}"}


def config(demo_data, strategy):
    return ["demo", "--set", f"data.root={demo_data}", "--set", "data.num_workers=0",
            "--set", f"trainer.max_epochs={EPOCHS}", "--set", f"trainer.strategy={strategy}", "--no-wait"]


def tracker_args(name: str, mlflow_server: str) -> list:
    return ["--set", "tracker=" + TRACKED[name].replace("%s", mlflow_server)] if name in TRACKED else []


def csv_steps(run_dir: Path, column: str) -> list:
    """The steps at which metrics.csv holds `column`: what every logger of the run was given."""
    import csv

    with (run_dir / "metrics.csv").open() as f:
        return sorted({int(row["step"]) for row in csv.DictReader(f) if row.get(column)})


def synced_to_one_mlflow_run(run_dir: Path, server: str) -> None:
    """`sync` sends the offline run to the server: one run, every step metrics.csv has, params and digests."""
    from mlflow.tracking import MlflowClient

    mlflow_up(server)
    assert "not synced: run-cluster sync" in run_cluster("status", run_dir).stdout
    done = run_cluster("sync", run_dir)
    assert done.returncode == 0 and "new metric point(s)" in done.stdout, done.stdout + done.stderr
    status = run_cluster("status", run_dir).stdout
    assert "tracker mlflow: run " in status and "), synced 20" in status, status
    client = MlflowClient(server)
    (run,) = client.search_runs([client.get_experiment_by_name("long-runs").experiment_id])
    for metric in ("train/loss", "val/loss"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
        assert sorted(set(steps)) == csv_steps(run_dir, metric), (metric, steps)
        assert metric != "train/loss" or len(steps) == len(set(steps)), steps  # no step logged twice
    assert len(set(csv_steps(run_dir, "val/loss"))) >= EPOCHS
    tags, image = run.data.tags, manifest(run_dir)["image"]["sha256"]
    assert tags["ct.image_sha256"] == image and tags["ct.run_id"] == "ci-slurm" and tags["ct.code_commit"]
    assert {f"ct.segment.{n}" for n in range(1, REQUEUES + 2)} <= set(tags), sorted(tags)
    assert run.data.params["trainer/max_epochs"] == str(EPOCHS) and run.info.status == "FINISHED"


def wandb_records(path: Path):
    """The records of a W&B transaction log, parsed with the client's own protobuf (wandb_internal_pb2.Record):
    a 7-byte header (:W&B, 0xBEE1, version), then LevelDB log blocks of 32 KiB holding 7-byte-headed chunks."""
    from wandb.proto import wandb_internal_pb2

    data, block, pos, chunks = path.read_bytes(), 32768, 7, b""
    assert data[:4] == b":W&B" and struct.unpack("<H", data[4:6])[0] == 0xBEE1, data[:7]
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if not (length or kind):  # a block's zero padding
            pos += left
            continue
        chunks, pos = chunks + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a FULL record, or a split one's LAST chunk
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            yield record
            chunks = b""


def one_wandb_run_with_continuous_steps(run_dir: Path) -> None:
    """One W&B run id over every segment: the client keeps a directory per process start (offline-run-<time>-<id>,
    the resumed parts `wandb sync` sends in start order), whose histories go on from step to step."""
    state = json.loads((run_dir / "trackers.json").read_text())["wandb"]
    dirs = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(dirs) == REQUEUES + 1 and all(d.name.endswith(f"-{state['id']}") for d in dirs), dirs
    steps = []
    for d in dirs:
        for record in wandb_records(d / f"run-{state['id']}.wandb"):
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            if "train/loss" in items:
                assert items["_step"] == items["trainer/global_step"], items  # W&B's own step goes on too
                steps.append(int(items["trainer/global_step"]))
    assert steps == csv_steps(run_dir, "train/loss"), steps  # every logged step, once, in order
    dry = subprocess.run([str(Path(sys.executable).parent / "wandb"), "sync", "--dry-run", *map(str, dirs)],
                         capture_output=True, text=True)  # the client's own command takes them
    assert dry.stdout.count(".wandb") + dry.stderr.count(".wandb") == len(dirs), dry.stdout + dry.stderr


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


def warned_until_ended(runs: dict, timeout_s: float) -> dict:
    """runs: name -> (run directory, scheduler, job id, requeues to ask for). Each run's segments once it ended."""
    warned = {name: [] for name in runs}  # epochs logged when each warning was sent
    ended = {}
    deadline = time.time() + timeout_s
    while len(ended) < len(runs) and time.time() < deadline:
        for name, (run_dir, scheduler, job_id, requeues) in runs.items():
            found = segments.read(run_dir)
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
    assert not missing, f"not ended in {timeout_s} s: {missing}\n" + "".join(job_logs(r[0])[-2000:] for r in runs.values())
    return ended


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


# The Lightning example (examples/lightning_smart) with ~100 s of training under requeue_1x1's 2-minute limit.
LIGHTNING = Path(__file__).resolve().parents[1] / "examples" / "lightning_smart" / "experiment.yaml"
LIGHTNING_LONG = ["--", "python", "train.py", "--config", "configs/train/requeue_1x1.yaml"]


def own_code_saved_on_the_warning_and_resumed(run_dir: Path, found: list) -> None:
    """Your own code: the warning reached it in the container, it saved where CT_CHECKPOINT_DIR said and exited with
    CT_REQUEUE_EXIT; the job requeued and the next segment resumed from that checkpoint to the end."""
    log = job_logs(run_dir)
    assert found[0].how == "REQUEUED" and found[-1].how == "COMPLETED", (found, log[-3000:])
    assert "asking for a requeue" in log and f"resuming from {run_dir}/checkpoints/last.ckpt" in log, log[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs"] == 30 and metrics["resumed_from"] == f"{run_dir}/checkpoints/last.ckpt"


def test_runs_longer_than_one_allocation_requeue_themselves_and_complete(cpu_image, slurm_cluster, demo_data,
                                                                        runs_dir, lsf_path, mlflow_server):
    """Slurm (one rank and two DDP ranks) and the LSF stand-in warned twice each, your own code under a real
    two-minute limit, and the uninterrupted references on the same shapes, all side by side."""
    submitted = {}
    for name, cluster, profile, args in (("reference", "ci-slurm", "n1_gpu1", config(demo_data, "single")),
                                         ("reference-ddp", "ci-slurm", "n1_gpu2", config(demo_data, "ddp")),
                                         ("ci-slurm", "ci-slurm", "n1_gpu1", config(demo_data, "single")),
                                         ("ci-slurm-ddp", "ci-slurm", "n1_gpu2", config(demo_data, "ddp")),
                                         ("ci-lsf", "ci-lsf", "one_gpu", config(demo_data, "single")),
                                         ("own-code", "ci-slurm", "requeue_1x1", [LIGHTNING, "--no-wait"])):
        done = run_cluster(cluster, profile, *args, "--run-id", name, *tracker_args(name, mlflow_server),
                           *(LIGHTNING_LONG * (name == "own-code")), env={**os.environ, **CANARIES})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        submitted[name] = manifest(runs_dir / name)["scheduler"]
    runs = {name: (runs_dir / name, job["name"], job["job_id"], REQUEUES if name.startswith("ci-") else 0)
            for name, job in submitted.items()}
    try:
        found = warned_until_ended(runs, 900)
    finally:  # a failed test leaves no job requeueing itself behind
        subprocess.run(["scancel", *(job["job_id"] for job in submitted.values() if job["name"] == "slurm")],
                       capture_output=True)
        subprocess.run(["bkill", submitted["ci-lsf"]["job_id"]], capture_output=True)
    for name, reference in (("ci-slurm", "reference"), ("ci-slurm-ddp", "reference-ddp"), ("ci-lsf", "reference")):
        assert len(found[name]) == REQUEUES + 1, found[name]
        assert_resumed_to_the_same_result(runs_dir / name, runs_dir / reference, found[name])
    synced_to_one_mlflow_run(runs_dir / "ci-slurm", mlflow_server)
    one_wandb_run_with_continuous_steps(runs_dir / "ci-slurm-ddp")
    no_canary_under(runs_dir / "ci-slurm", runs_dir / "ci-slurm-ddp")
    own_code_saved_on_the_warning_and_resumed(runs_dir / "own-code", found["own-code"])
    slurm_job, lsf_job = submitted["ci-slurm"]["job_id"], submitted["ci-lsf"]["job_id"]
    assert {s.job_id for s in found["ci-slurm"]} == {slurm_job}  # a requeued job keeps its id
    log = (runs_dir / "ci-slurm" / "logs" / f"job-{slurm_job}.out").read_text()
    assert re.search(r"stop requested \(SIGUSR1\): saved .* at step \d+", log), log[-3000:]
    bhist = subprocess.run(["bhist", "-l", lsf_job], capture_output=True, text=True)
    assert bhist.stdout.lower().count("requeued") >= REQUEUES, bhist.stdout
