"""How long `bin/run-cluster ci-slurm n1_gpu1 demo --dry-run` takes, a whole process as a user waits for it: wall and
CPU seconds, min/median/max over N runs after one warm-up -> benchmarks/results/<host>-<date>-cli.json. Target (issue
40): at most 0.3 s on this 2-core machine. `--baseline DIR` times another checkout (e.g. main's) in the same loop,
runs alternated, so that the load of a shared machine falls on both alike.

Two ways Python may start: with its bytecode cached (its default; here in a folder of the bench's own, so that nothing
is written into a shared venv), and with PYTHONDONTWRITEBYTECODE=1, as this machine's shells set it (bin/run-cluster
then keeps its bytecode in ~/.cache/cluster-train). The demo's data folder is made empty for the run if missing, as
the test session does (a dry run checks that it exists)."""
import argparse
import datetime
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["ci-slurm", "n1_gpu1", "demo", "--dry-run"]
TARGET_S = 0.3


def timed(checkout: Path, env: Dict[str, str]) -> Dict[str, float]:
    """Wall and CPU seconds (the child's user + system) of one dry run in `checkout`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(checkout / "bin" / "run-cluster"), *COMMAND], cwd=checkout,
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{checkout}: run-cluster {' '.join(COMMAND)} failed: {done.stderr.strip()[-500:]}")
    return {"wall": wall, "cpu": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime}


def spread(values: List[float]) -> Dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def environments(tmp: str) -> Dict[str, Dict[str, str]]:
    cached = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    return {"bytecode cached": {**cached, "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache")},
            "PYTHONDONTWRITEBYTECODE=1": {**cached, "PYTHONDONTWRITEBYTECODE": "1"}}


def measure(checkouts: Dict[str, Path], runs: int, env: Dict[str, str]) -> Dict[str, dict]:
    for checkout in checkouts.values():
        timed(checkout, env)  # the warm-up: bytecode and compiled templates cached, as on every later command
    samples: Dict[str, List[Dict[str, float]]] = {name: [] for name in checkouts}
    for _ in range(runs):
        for name, checkout in checkouts.items():
            samples[name].append(timed(checkout, env))
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
    made = [path for path in (c / "data" / "cifar100-synthetic" for c in checkouts.values()) if not path.exists()]
    for path in made:
        path.mkdir(parents=True)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
            measured = {mode: measure(checkouts, args.runs, env) for mode, env in environments(tmp).items()}
    finally:
        for path in made:
            path.rmdir()
    today = datetime.date.today().isoformat()
    result = {"host": socket.gethostname(), "date": today, "cpus": os.cpu_count(),
              "command": "bin/run-cluster " + " ".join(COMMAND), "runs": args.runs, "target_s": TARGET_S,
              "commit": commit(), "baseline": str(args.baseline) if args.baseline else None,
              "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
              "measured": measured,
              "meets_target": all(m["this checkout"]["wall_s"]["median"] <= TARGET_S for m in measured.values())}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"{result['host']}-{today}-cli.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(measured, indent=2))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
