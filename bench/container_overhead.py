"""Container overhead: the same torch build inside an image (`apptainer exec`, as a job runs it) and outside it.

Per-rank start time (`python -c "import torch"`: cold, after dropping the page cache, and warm, the median of
several) and CPU training throughput of one plain-torch loop (bench/overhead_workload.py), runs alternated inside
and outside so drift hits both. Writes bench/results/<host>-<date>-container.json. `make bench-container`.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "overhead_workload.py"


def seconds(command) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def drop_page_cache() -> bool:
    """Cold start: the image's and the venv's files read from disk again (root only)."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def workload(python, steps: int, threads: int) -> dict:
    done = subprocess.run([*python, str(WORKLOAD), str(steps), str(threads)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(sides: dict, runs: int, steps: int, threads: int) -> dict:
    result = {name: {"cold_start_s": None, "warm_start_s": [], "samples_per_s": []} for name in sides}
    for name, python in sides.items():
        if drop_page_cache():
            result[name]["cold_start_s"] = round(seconds([*python, "-c", "import torch"]), 2)
    for _ in range(runs):  # alternated: inside, outside, inside, ...
        for name, python in sides.items():
            result[name]["warm_start_s"].append(seconds([*python, "-c", "import torch"]))
            ran = workload(python, steps, threads)
            result[name]["samples_per_s"].append(ran["samples_per_s"])
            result[name]["torch"], result[name]["python"] = ran["torch"], ran["python"]
    for side in result.values():
        side["warm_start_s"] = round(statistics.median(side["warm_start_s"]), 2)
        side["samples_per_s"] = round(statistics.median(side["samples_per_s"]), 1)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image", required=True, help="the SIF (images/cuda12.8.sif)")
    p.add_argument("--outside", required=True, help="a python with the same torch release as the image")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out-dir", default=str(HERE / "results"))
    args = p.parse_args()
    sides = {"inside": ["apptainer", "exec", "--cleanenv", "--no-home", args.image, "python"],
             "outside": [args.outside]}
    started, load = time.time(), os.getloadavg()[0]
    result = measure(sides, args.runs, args.steps, args.threads)
    inside, outside = result["inside"], result["outside"]
    summary = {
        "host": socket.gethostname(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(), "threads": args.threads, "image": args.image, "runs": args.runs, **result,
        "throughput_ratio_inside_over_outside": round(inside["samples_per_s"] / outside["samples_per_s"], 3),
        "warm_start_extra_s": round(inside["warm_start_s"] - outside["warm_start_s"], 2),
        "total_s": round(time.time() - started, 1), "load_average_at_start": round(load, 2),
        "note": "the same torch release and CUDA build on both sides; the image's CPython is Debian's 3.13, outside "
                "it is this machine's; CPU only (no GPU here)",
    }
    out = Path(args.out_dir) / f"{socket.gethostname()}-{datetime.date.today().isoformat()}-container.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
