"""The demo's epoch time with four 1-CPU ranks side by side against one rank alone, before and after each rank's
threads followed its share of the job's CPUs (cluster_train/image/threads.py) ->
benchmarks/results/<host>-<date>-threads.json.

"before": no scheduler variable, so PyTorch sizes each rank's pool by the machine's cores (what every rank did
before); "after": each rank is a 1-CPU Slurm task (SLURM_CPUS_PER_TASK=1), so it computes on one thread. The ranks
are seed 001's shape: independent single-GPU trainings packed on one node (pack_4x1), here on this machine's CPUs.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"before": {}, "after": {"SLURM_CPUS_PER_TASK": "1", "CT_LAUNCH": "srun"}}


def config(tmp: Path, name: str, data: str, epochs: int) -> Path:
    run = yaml.safe_load((ROOT / "experiments" / "demo.yaml").read_text())
    run.update(output_dir=str(tmp / name))
    run["data"].update(root=data, num_workers=0)
    run["trainer"].update(max_epochs=epochs, strategy="single", accelerator="cpu")
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(run))
    return path


def epoch_times(ranks: int, setting: str, data: str, epochs: int) -> list:
    """Each rank's last epoch time (s), all ranks started at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMP_", "MKL_", "CT_"))}
    env.update(SETTINGS[setting])
    with tempfile.TemporaryDirectory() as tmp:
        procs = [subprocess.Popen([sys.executable, "-m", "train", "fit", "--config",
                                   str(config(Path(tmp), f"rank{i}", data, epochs))], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(ranks)]
        outputs = [p.communicate()[0] for p in procs]
    times = []
    for out in outputs:
        found = re.findall(rf"\[cluster-train\] epoch {epochs}/{epochs} .*\(([\d.]+) s\)", out)
        if not found:
            raise SystemExit(f"no epoch {epochs} line in a rank's output:\n{out[-2000:]}")
        times.append(float(found[-1]))
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", default=str(ROOT / "data" / "cifar100-synthetic"))
    p.add_argument("--epochs", type=int, default=2, help="the last epoch is timed (the first warms up)")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args()
    results = {"machine": {"host": socket.gethostname(), "cpus": os.cpu_count()},
               "workload": f"experiments/demo.yaml, strategy single, data.num_workers 0, epoch {args.epochs} timed"}
    for ranks in (1, 4):
        for setting in ("before", "after"):
            started = time.time()
            times = epoch_times(ranks, setting, args.data, args.epochs)
            results[f"{ranks}_rank{'s' * (ranks > 1)}_{setting}"] = {
                "epoch_s_median": round(statistics.median(times), 2), "epoch_s": times,
                "wall_s": round(time.time() - started, 1)}
            print(f"{ranks} rank(s), {setting}: epoch {statistics.median(times):.2f} s", flush=True)
    out = Path(args.out_dir) / f"{socket.gethostname()}-{time.strftime('%Y-%m-%d')}-threads.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
