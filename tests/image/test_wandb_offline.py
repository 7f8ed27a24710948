"""W&B offline across segments (cluster_train/shared/wandb_offline.py): each process start of the real client writes its
own offline directory; the run keeps one, and W&B's own reader (`wandb leet inspect`, wandb-core's) reads it as one run
with every step once. The requeued Slurm run (tests/cluster/test_long_runs.py) proves the same through the job
script."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wandb_records

from cluster_train.shared import config as cfg
from cluster_train.shared import wandb_offline

pytest.importorskip("wandb")
WANDB = str(Path(sys.executable).parent / "wandb")
BIG = "x" * 70000  # one record over two of the log's 32 KiB blocks: its chunks must be split and joined right


def segment(run, out: Path, steps: range, exit_code: int = 75, killed: bool = False) -> None:
    """One segment as the job runs it: the logger made (folding what an earlier one left), steps logged, closed."""
    import wandb

    from cluster_train.image import trackers

    (logger,) = trackers.loggers(run, out)
    trackers.write_state(out, "wandb", {"id": logger.experiment.id, "offline": True})  # as TrackedRun keeps it
    logger.experiment.config.update({"big": BIG}, allow_val_change=True)
    for step in steps:
        logger.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
    if not killed:  # 75: saved for a requeue
        trackers.finish(run, exit_code)
    else:  # no fold at its end, and a torn last chunk
        wandb.finish()
        wandb.teardown()  # the log whole before it is torn: wandb-core writes its tail after finish() returns
        # this segment's log: the newest (the earlier segment's directory has the same run id)
        log = max((out / "wandb").glob(f"offline-run-*-{logger.experiment.id}/run-*.wandb"),
                  key=lambda path: path.stat().st_mtime_ns)
        log.write_bytes(log.read_bytes()[:-3])


def test_a_run_of_three_segments_leaves_one_offline_directory_wandb_reads_as_one_run(tmp_path, monkeypatch):
    from cluster_train.host.runs import tracker_sync as sync

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run = cfg.resolve({"output_dir": str(tmp_path), "tracker": {"use": ["wandb"], "offline": True}})
    segment(run, tmp_path, range(0, 10))
    segment(run, tmp_path, range(10, 20), killed=True)  # folded by the next segment's start
    first, second = wandb_offline.segment_dirs(tmp_path / "wandb", trackers_id(tmp_path))
    assert wandb_offline.fold(tmp_path / "wandb", trackers_id(tmp_path), leave_last=True) == first
    assert second.is_dir() and not (first / "segments").exists()  # `sync` while it runs: its directory left alone
    segment(run, tmp_path, range(20, 30), exit_code=0)
    (folded,) = (tmp_path / "wandb").glob("offline-run-*")
    records = wandb_records(folded)
    kinds = [r["type"] for r in records]
    assert [r["num"] for r in records] == list(range(1, len(records) + 1))
    assert kinds.count("header") == kinds.count("run") == kinds.count("exit") == 1 and kinds[-1] == "exit"
    steps = [r["history"]["item"]["_step"] for r in records if "train/loss" in r.get("history", {}).get("item", {})]
    assert steps == list(range(30)), steps  # every step once, in order, across the three processes
    assert sum(json.dumps(r).count(BIG) for r in records if r["type"] == "config") == 3
    log = folded / f"run-{trackers_id(tmp_path)}.wandb"
    before = (log.read_bytes(), log.stat().st_mtime_ns)
    assert wandb_offline.fold(tmp_path / "wandb", trackers_id(tmp_path)) == folded
    assert (log.read_bytes(), log.stat().st_mtime_ns) == before  # folding again: nothing new, nothing rewritten
    dry = subprocess.run([WANDB, "sync", "--dry-run", str(folded)], capture_output=True, text=True, timeout=120)
    assert "Would sync 1 run(s)" in dry.stdout + dry.stderr, dry.stdout + dry.stderr
    sync_status_follows_the_log(tmp_path, sync)


def trackers_id(out: Path) -> str:
    return json.loads((out / "trackers.json").read_text())["wandb"]["id"]


def sync_status_follows_the_log(out: Path, sync) -> None:
    """`status`: synced while the folded log is as long as `sync` sent it; a later segment makes it not synced."""
    (out / "config.yaml").write_text("tracker: {use: [wandb], offline: true}\n")
    entry = json.loads((out / "trackers.json").read_text())["wandb"]
    assert sync.status_lines(out)[0].endswith(f"not synced: run-cluster sync {out}")
    log = next((out / "wandb").glob("offline-run-*/run-*.wandb"))
    sync.write_synced(out, "wandb", {"bytes": log.stat().st_size, "at": "2026-11-26T00:00:00+0000"})  # as sync does
    assert sync.status_lines(out)[0].endswith("synced 2026-11-26T00:00:00+0000")
    with open(log, "ab") as grown:
        grown.write(b"\0")
    assert sync.wandb_synced(out, "wandb", entry) is False
