"""How long `bin/run-cluster ci-slurm n1_gpu1 demo --dry-run` takes, a whole process as a user waits for it: wall and
CPU seconds, min/median/max over N runs after one warm-up -> benchmarks/results/<host>-<date>-cli.json. Target (issue
40): at most 0.3 s on this 2-core machine. `--baseline DIR` times another checkout (e.g. main's) in the same loop,
runs alternated, so that the load of a shared machine falls on both alike.

The environment is this shell's (PYTHONDONTWRITEBYTECODE included: the result says whether it was set). The demo's
data folder is made empty for the run if missing, as the test session does (a dry run checks that it exists)."""
import argparse
import datetime
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["ci-slurm", "n1_gpu1", "demo", "--dry-run"]
TARGET_S = 0.3


def timed(checkout: Path) -> Dict[str, float]:
    """Wall and CPU seconds (the child's user + system) of one dry run in `checkout`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(checkout / "bin" / "run-cluster"), *COMMAND], cwd=checkout,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{checkout}: run-cluster {' '.join(COMMAND)} failed: {done.stderr.strip()[-500:]}")
    return {"wall": wall, "cpu": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime}


def spread(values: List[float]) -> Dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def measure(checkouts: Dict[str, Path], runs: int) -> Dict[str, dict]:
    made = [path for path in (c / "data" / "cifar100-synthetic" for c in checkouts.values()) if not path.exists()]
    for path in made:
        path.mkdir(parents=True)
    try:
        for checkout in checkouts.values():
            timed(checkout)  # the warm-up: bytecode and compiled templates cached, as on every later command
        samples: Dict[str, List[Dict[str, float]]] = {name: [] for name in checkouts}
        for _ in range(runs):
            for name, checkout in checkouts.items():
                samples[name].append(timed(checkout))
    finally:
        for path in made:
            path.rmdir()
    return {name: {"wall_s": spread([s["wall"] for s in runs_of]), "cpu_s": spread([s["cpu"] for s in runs_of])}
            for name, runs_of in samples.items()}


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    return head.stdout.strip() + ("+changes" if dirty else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--baseline", type=Path, help="another checkout to time alike (its own bin/run-cluster)")
    p.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    checkouts = {"this checkout": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    load_before = os.getloadavg()[0]
    measured = measure(checkouts, args.runs)
    today = datetime.date.today().isoformat()
    result = {"host": socket.gethostname(), "date": today, "cpus": os.cpu_count(),
              "command": "bin/run-cluster " + " ".join(COMMAND), "runs": args.runs, "target_s": TARGET_S,
              "commit": commit(), "baseline": str(args.baseline) if args.baseline else None,
              "PYTHONDONTWRITEBYTECODE": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
              "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
              "measured": measured, "meets_target": measured["this checkout"]["wall_s"]["median"] <= TARGET_S}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"{result['host']}-{today}-cli.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(measured, indent=2))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
