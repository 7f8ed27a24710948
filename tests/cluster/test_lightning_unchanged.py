"""Issue 56 item 2's acceptance, inside the image: an unchanged Lightning script (examples/lightning_unchanged/train.py:
Trainer() with no devices, nodes or strategy, no cluster code) trains ONE model over every rank: on 2 Slurm nodes
(srun, Lightning's SLURMEnvironment), on 2 LSF hosts (blaunch) and on local's 2 processes (the runner starts the
ranks): both ranks in one rendezvous (Lightning's `MEMBER: 1/2`, `2/2`), one test loss. The same script with the
documented callback (resumable.py), warned as its time limit would (scancel --batch --signal=USR1), saves, exits 75,
is requeued, resumes and ends with the same weights, bit for bit, as the uninterrupted Slurm run. Lightning's own
SLURM auto-requeue never takes the warning (no `Handling auto-requeue signal`, no hpc_ckpt). Four small jobs at once;
the host-side checks of the same: tests/host/test_lightning_launch.py, tests/image/test_resume_lightning.py."""
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, assert_same_tensors, job_logs, manifest, release_requeued, run_cluster

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
EXAMPLE = ROOT / "examples" / "lightning_unchanged"
ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "TERMINATED")
JOBS = {"slurm": ("ci-slurm", "n2_gpu1", ["train.py"]),
        "slurm-warned": ("ci-slurm", "n2_gpu1", ["resumable.py", "--step-sleep", "0.5"]),
        "lsf": ("ci-lsf", "two_hosts", ["train.py"]),
        "local": ("local", "cpu_2proc", ["train.py"])}
MEMORY = ["--set", "data.rank_mem_gb=1"]  # a small model: 1 GB per rank (the 4 GB default does not fit local's RAM)


def one_model_over_two_ranks(run_dir: Path) -> str:
    """Both ranks met in one process group and reported the same test loss; the loss."""
    log = job_logs(run_dir)
    ranks = re.findall(r"^rank (\d)/(\d) nodes \d test_loss (\S+)$", log, re.M)
    assert sorted(r for r, _, _ in ranks) == ["0", "1"] and {w for _, w, _ in ranks} == {"2"}, log[-3000:]
    assert len({loss for _, _, loss in ranks}) == 1, ranks  # one model: one test loss (two trainings had two)
    errors = "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*.err")))
    assert "MEMBER: 1/2" in log + errors and "MEMBER: 2/2" in log + errors, log[-3000:]  # LSF: stderr in .err
    assert "Handling auto-requeue signal" not in log and not list(run_dir.rglob("hpc_ckpt*")), log[-3000:]
    return ranks[0][2]


def test_an_unchanged_lightning_script_trains_one_model_everywhere_and_resumes_bit_for_bit(
        cpu_image, slurm_cluster, runs_dir, lsf_path):
    for name, (cluster, profile, command) in JOBS.items():
        done = run_cluster(cluster, profile, "--run-id", name, "--no-wait", *MEMORY, "--", "python", *command,
                           cwd=EXAMPLE)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    warned = runs_dir / "slurm-warned"
    job_id = manifest(warned)["scheduler"]["job_id"]
    try:
        found = until_ended({name: runs_dir / name for name in JOBS}, warned, job_id, 600)
    finally:  # a failed test leaves no job requeueing itself behind
        subprocess.run(["scancel", job_id], capture_output=True)
    for name in JOBS:
        assert found[name][-1].how == "COMPLETED", (name, found[name], job_logs(runs_dir / name)[-3000:])
    losses = {name: one_model_over_two_ranks(runs_dir / name) for name in JOBS}
    log = job_logs(warned)
    assert [s.how for s in found["slurm-warned"]] == ["REQUEUED", "COMPLETED"], (found["slurm-warned"], log[-3000:])
    assert "stop requested: saved" in log and f"resuming from {warned}/checkpoints/last.ckpt" in log, log[-3000:]
    assert losses["slurm-warned"] == losses["slurm"]
    assert_same_tensors(runs_dir / "slurm" / "final_weights.pt", warned / "final_weights.pt")


def until_ended(runs: dict, warned: Path, job_id: str, timeout_s: float) -> dict:
    """Each run's segments once it ended; the warned run gets SIGUSR1 through its batch shell once, after its first
    epoch (the batch shell passes it to srun's tasks, as at the time limit), and its requeue is released."""
    deadline, sent, ended = time.time() + timeout_s, False, {}
    while len(ended) < len(runs) and time.time() < deadline:
        for name, run_dir in runs.items():
            found = segments.read(run_dir)
            if found and found[-1].how in ENDED:
                ended.setdefault(name, found)
        if not sent and "epoch 0 done" in job_logs(warned):
            subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], capture_output=True)
            sent = True
        release_requeued(job_id)
        time.sleep(0.5)
    assert len(ended) == len(runs), {name: segments.read(d) for name, d in runs.items() if name not in ended}
    return ended
