"""A node's ranks starting together, as srun starts them from one parent: the seconds until every one of 1, 2, 4 and 8
ranks has imported torch and Lightning, bare and in the container three ways (issue 47):
- "a mount per rank": `apptainer exec` of the SIF per rank (profiles with share_mount: false, your own code);
- "one mount per node (--sharens)": the ranks join the first one's container (the trainer's srun ranks);
- "a sandbox on local disk": the SIF unpacked to node-local disk once per node per job (`apptainer build --sandbox`,
  its seconds counted in), then every rank execs the directory.
"bare" is chroot into the SIF's own files (benchmarks/container_overhead.py): the same Python, torch and bytecode.
extra_per_rank_s = (side - bare) / ranks, the goal being at most 0.5 s at 4 ranks. Warm: the SIF in the page cache, as
on a node that ran the job's image before; medians of --runs, sides alternated. Root only.
Writes benchmarks/results/<host>-<date>-rank-start.json. `make bench-rank-start`.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from container_overhead import APPTAINER, at_once, outside, sandbox

HERE = Path(__file__).resolve().parent


def unpacked_then_at_once(image: str, ranks: int) -> float:
    """Unpack the SIF to local disk (once per node per job), then start the ranks from it; seconds for both."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("CT_BENCH_TMP", "/var/tmp")) as tmp:
        started = time.perf_counter()
        subprocess.run(["apptainer", "build", "--sandbox", f"{tmp}/root", image], check=True, capture_output=True)
        return time.perf_counter() - started + at_once([*APPTAINER, f"{tmp}/root", "python"], ranks)


def measure(image: str, root: Path, counts: list, runs: int) -> dict:
    sides = {"bare": lambda n: at_once(outside(root), n),
             "a mount per rank": lambda n: at_once([*APPTAINER, image, "python"], n),
             "one mount per node (--sharens)": lambda n: at_once([*APPTAINER, "--sharens", image, "python"], n),
             "a sandbox on local disk": lambda n: unpacked_then_at_once(image, n)}
    found = {n: {name: [] for name in sides} for n in counts}
    for _ in range(runs):  # alternated, so that drift hits every side
        for n in counts:
            for name, start in sides.items():
                found[n][name].append(start(n))
    result = {}
    for n in counts:
        wall = {name: round(statistics.median(v), 2) for name, v in found[n].items()}
        result[str(n)] = {"all_ranks_started_s": wall,
                          "extra_per_rank_s": {name: round((s - wall["bare"]) / n, 2)
                                               for name, s in wall.items() if name != "bare"}}
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image", required=True, help="the SIF jobs run (images/cpu.sif, images/cuda12.8.sif)")
    p.add_argument("--ranks", default="1,2,4,8", help="ranks per node, comma-separated")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out-dir", default=str(HERE / "results"))
    args = p.parse_args()
    started, load = time.time(), os.getloadavg()[0]
    with sandbox(args.image) as root:
        result = measure(args.image, root, [int(n) for n in args.ranks.split(",")], args.runs)
    summary = {"host": socket.gethostname(), "cpu_count": os.cpu_count(),
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "image": args.image, "image_mib": round(Path(args.image).stat().st_size / 2**20),
               "apptainer": subprocess.run(["apptainer", "--version"], capture_output=True, text=True).stdout.strip(),
               "runs": args.runs, "probe": "python -c 'import torch, pytorch_lightning'", "ranks": result,
               "total_s": round(time.time() - started, 1), "load_average_at_start": round(load, 2),
               "command": f"python3 benchmarks/rank_start.py --image {args.image} --ranks {args.ranks} "
                          f"--runs {args.runs}"}
    out = Path(args.out_dir) / f"{socket.gethostname()}-{datetime.date.today().isoformat()}-rank-start.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
