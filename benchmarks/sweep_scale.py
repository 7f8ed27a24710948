"""A 1000-element sweep: preparing it (every element built, checked and rendered; `--dry-run`) and `status` of it
once queued on the test Slurm cluster -> benchmarks/results/<host>-<date>-sweeps.json. Targets (issue 26): at most
5 s to prepare, at most 2 s for status, on this 2-core machine.

The images are stand-ins (tiny files recorded in a store of their own, as the tests make them): nothing here
trains. The queued array is cancelled at once with `run-cluster cancel`, so status reads 1000 ended elements;
an element that started before the cancel fails on the stand-in image, which status reads the same way.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ["ci-slurm", "n1_gpu1", "demo"]
TARGETS_S = {"prepare": 5.0, "status": 2.0}


def run_cluster(*args: str, env: dict) -> float:
    """Seconds one bin/run-cluster command took (a whole process, as a user waits for it)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "bin" / "run-cluster"), *args], capture_output=True, text=True,
                          env=env)
    took = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"run-cluster {' '.join(args[:4])} ... failed: {done.stderr.strip()[-500:]}")
    return took


def stand_in_store(tmp: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from cluster_train.host.images import store

    for flavor in ("cpu", "cuda12.8"):
        sif = tmp / f"{flavor}.sif"
        sif.write_text(f"stand-in {flavor} image\n")
        store.record(flavor, sif, ROOT / "pyproject.toml", ROOT / "pyproject.toml", root=tmp / "images")
    (tmp / "settings.yaml").write_text("{}\n")
    (tmp / "runs").mkdir()
    return {**os.environ, "CT_IMAGES": str(tmp / "images"), "CT_SETTINGS": str(tmp / "settings.yaml"),
            "CT_RUNS_DIR": str(tmp / "runs")}


def measure(elements: int, repeats: int) -> dict:
    values = ",".join(f"{i / 1e5:g}" for i in range(1, elements + 1))
    sweep = [*CLUSTER, "--sweep", f"optim.lr={values}", "--stale-image-ok"]
    with tempfile.TemporaryDirectory(prefix="bench-sweeps-") as tmp:
        env = stand_in_store(Path(tmp))
        prepare = [run_cluster(*sweep, "--dry-run", env=env) for _ in range(repeats)]
        result = {"elements": elements, "prepare_s": prepare}
        if subprocess.run(["bash", str(ROOT / "tests/slurm/cluster.sh"), "status"], capture_output=True).returncode:
            result["status_s"] = None
            result["status_skipped"] = "the test Slurm cluster is not up (make slurm)"
            return result
        run_cluster(*sweep, "--run-id", "big", "--no-wait", env=env)
        sweep_dir = str(Path(tmp) / "runs" / "big")
        run_cluster("cancel", sweep_dir, env=env)
        result["status_s"] = [run_cluster("status", sweep_dir, env=env) for _ in range(repeats)]
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--elements", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                   f"{socket.gethostname().split('.')[0]}-{time.strftime('%Y-%m-%d')}-sweeps.json")
    args = p.parse_args()
    result = measure(args.elements, args.repeats)
    medians = {name: statistics.median(result[f"{name}_s"]) for name in TARGETS_S if result.get(f"{name}_s")}
    result.update(medians_s=medians, targets_s=TARGETS_S, cpus=os.cpu_count(),
                  meets_targets={name: medians[name] <= TARGETS_S[name] for name in medians})
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("elements", "medians_s", "targets_s", "meets_targets")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
