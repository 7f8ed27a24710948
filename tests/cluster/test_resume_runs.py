"""`bin/run-cluster resume` inside the image: an ended run continues in its own directory from its last checkpoint,
with more epochs and on another number of ranks for the strategies whose checkpoints re-shard (ddp, fsdp); the others
(DeepSpeed ZeRO) are refused before anything is queued."""
import json
import re

import pytest
from conftest import manifest, run_cluster

from cluster_train.host.runs import segments

pytestmark = pytest.mark.image
FEW_BATCHES = ["--set", "trainer.limit_train_batches=8", "--set", "trainer.limit_val_batches=2"]  # steps, not accuracy


# fsdp, the re-sharding strategy that is not the profile's: the step goes on and the run's --set strategy stays (ddp
# would prove less: cpu_2proc's own strategy; every strategy's checkpoint on other rank counts: test_resume_export.py)
@pytest.mark.parametrize("strategy", ["fsdp"])
def test_resume_with_more_epochs_on_two_ranks_continues_from_the_saved_step(cpu_image, demo_data, runs_dir,
                                                                             strategy):
    common = ["--set", f"data.root={demo_data}", "--set", "data.num_workers=0", "--set", f"trainer.strategy={strategy}",
              *FEW_BATCHES]
    first = run_cluster("local", "cpu_1proc", "demo", *common, "--set", "trainer.max_epochs=2", "--run-id", "r",
                        "--wait")
    assert first.returncode == 0, first.stdout[-3000:]
    assert re.search(r"^job \S+: COMPLETED, epoch 2/2 step \d+ train/loss [\d.]+, in \d+", first.stderr, re.M), \
        first.stderr  # --wait's status, piped: plain lines ending with the job's state and rank 0's last epoch
    run_dir = runs_dir / "r"
    again = run_cluster("resume", run_dir, "--profile", "cpu_2proc", "--set", "trainer.max_epochs=4", "--wait")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    found = segments.read(run_dir)
    assert [s.how for s in found] == ["COMPLETED", "COMPLETED"]
    resumed = found[1].resumed
    assert resumed and resumed[0]["resumed_step"] > 0, resumed  # the step counter goes on from the first run
    results = json.loads((run_dir / "results.json").read_text())
    assert results["epochs"] == 4 and results["world_size"] == 2
    record = manifest(run_dir)
    assert record["profile"] == "cpu_2proc" and "trainer.max_epochs=4" in record["resumes"][0]["overrides"]
    assert record["config"]["trainer"]["strategy"] == strategy  # the --set strategy, not cpu_2proc's ddp
    assert (run_dir / "job.0.sh").is_file() and (run_dir / "job.sh").is_file()  # every script that ran stays


def test_resume_refuses_another_rank_count_for_a_strategy_that_cannot_reshard(cpu_image, demo_data, runs_dir):
    """Decided from the run's record before anything is queued, so the ZeRO-2 run is cancelled as it starts (its
    per-rank files: test_zero_layout.py in the image); training it here would only add DeepSpeed's op build."""
    first = run_cluster("local", "cpu_1proc", "demo", "--set", f"data.root={demo_data}", "--set",
                        "trainer.strategy=zero2", "--run-id", "z", "--no-wait")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    assert run_cluster("cancel", runs_dir / "z").returncode == 0
    refused = run_cluster("resume", runs_dir / "z", "--profile", "cpu_2proc")
    assert refused.returncode == 2 and "cannot re-shard it to 2" in refused.stderr, refused.stderr
    assert manifest(runs_dir / "z").get("resumes") is None  # nothing queued, nothing recorded
