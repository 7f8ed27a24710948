"""Issue 56 item 3 on the test Slurm cluster: the nanoGPT-shaped example (examples/nanogpt_shaped), plain DDP with the
resume helper (cluster_train/image/resume.py), run as docs/how-to/own-code.md walks through it: its data prepared
outside the code (git ignores *.bin) and bound with --data, warned twice mid-run (the scheduler's own warning,
`scancel --batch --signal=USR1`, once each segment has trained: tests/cluster/test_long_runs.py says why), requeued
twice, and ended bit for bit as an uninterrupted run of the same shape (1 node x 2 ranks), with its results contract
(metrics.csv, results.json) in the run directory."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, job_logs, manifest, release_requeued, run_cluster

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
EXAMPLE = ROOT / "examples" / "nanogpt_shaped"
MAX_ITERS = 1500  # 5-25 ms each here: the run outlasts two warnings' way to the ranks (a stop file read each second)
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8", "--eval_interval=500",
        "--eval_iters=2", "--warmup_iters=50", "--log_interval=50", f"--max_iters={MAX_ITERS}"]
WARNINGS = 2


def iter_lines(run_dir: Path) -> int:
    return len(re.findall(r"^iter \d+:", job_logs(run_dir), re.M))


def warned_until_ended(runs: dict, timeout_s: float = 600) -> dict:
    """runs: name -> (run directory, job id, warnings to send). Each warning goes to a segment that has trained (an
    iter line since the last warning); every run's segments once it ended."""
    sent = {name: [] for name in runs}  # iter lines logged when each warning was sent
    ended, deadline = {}, time.time() + timeout_s
    while len(ended) < len(runs) and time.time() < deadline:
        for name, (run_dir, job_id, warnings) in runs.items():
            found = segments.read(run_dir)
            if name in ended or not found:
                continue
            if found[-1].how in ("COMPLETED", "FAILED", "TIMEOUT"):
                ended[name] = found
                continue
            release_requeued(job_id)
            trained = iter_lines(run_dir)
            if (len(sent[name]) < warnings and len(found) == len(sent[name]) + 1 and not found[-1].how
                    and trained > (sent[name] or [0])[-1]):
                subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], capture_output=True)
                sent[name].append(trained)
        time.sleep(0.5)
    assert len(ended) == len(runs), {n: (segments.read(r[0]), job_logs(r[0])[-2000:]) for n, r in runs.items()}
    return ended


def checkpoint(run_dir: Path):
    import torch

    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return saved["step"], saved["state"]["model"], saved["state"]["optimizer"]["state"]


def test_the_nanogpt_shaped_example_resumes_bit_identically_over_two_requeues(cpu_image, slurm_cluster, runs_dir,
                                                                              tmp_path):
    data = tmp_path / "shakespeare_char"
    subprocess.run([sys.executable, str(EXAMPLE / "prepare.py"), "--demo", str(data)], check=True, capture_output=True)
    jobs = {}
    for name in ("whole", "cut"):
        done = run_cluster("ci-slurm", "n1_gpu2", EXAMPLE / "experiment.yaml", "--run-id", name, "--no-wait",
                           "--stale-image-ok", "--data", data, "--", "python", "train.py", *TINY)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        jobs[name] = manifest(runs_dir / name)["scheduler"]["job_id"]
    try:
        found = warned_until_ended({"whole": (runs_dir / "whole", jobs["whole"], 0),
                                    "cut": (runs_dir / "cut", jobs["cut"], WARNINGS)})
    finally:  # a failed test leaves no job requeueing itself behind
        subprocess.run(["scancel", *jobs.values()], capture_output=True)
    whole, cut = runs_dir / "whole", runs_dir / "cut"
    log = job_logs(cut)
    assert [s.how for s in found["whole"]] == ["COMPLETED"], job_logs(whole)[-3000:]
    assert [s.how for s in found["cut"]] == ["REQUEUED"] * WARNINGS + ["COMPLETED"], log[-3000:]
    stops = [int(s) for s in re.findall(rf"saved {cut}/checkpoints/last.ckpt at step (\d+)", log)]
    assert len(stops) == WARNINGS + 1 and stops[-1] == MAX_ITERS and 0 < stops[0] < stops[1] < MAX_ITERS, stops
    assert [int(s) for s in re.findall(r"resuming from \S+ at step (\d+)", log)] == stops[:WARNINGS], log[-3000:]
    assert [r["resumed_step"] for s in found["cut"][1:] for r in s.resumed] == stops[:WARNINGS]  # status's record
    step, weights, optimizer = checkpoint(cut)
    step_whole, weights_whole, optimizer_whole = checkpoint(whole)
    assert step == step_whole == MAX_ITERS
    assert [k for k in weights_whole if not weights[k].equal(weights_whole[k])] == []
    assert all(optimizer[i]["exp_avg_sq"].equal(optimizer_whole[i]["exp_avg_sq"]) for i in optimizer_whole)
    assert (cut / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()  # every row once, in order
    results = json.loads((cut / "results.json").read_text())
    assert results == json.loads((whole / "results.json").read_text()) and results["iters"] == MAX_ITERS
    recorded = manifest(cut)["data"]  # the bind, with its digest
    assert recorded["root"] == str(data) and recorded["digest"] == manifest(whole)["data"]["digest"], recorded
