"""Container start and throughput: the image's own files run inside the container and outside it, so the container
is the only difference (issue 29).

"outside" is a directory holding the SIF's root file system (`apptainer build --sandbox`), entered with chroot:
the same Python, torch, bytecode and libraries, read from the host's disk through its page cache. "inside" is
`apptainer exec` of the SIF as a job runs it, and of each variant named (the same files packed another way, or the
sandbox directory run by Apptainer, which separates Apptainer's own start from the SquashFS mount). Per side:
`python -c pass`, `import torch`, `import torch, pytorch_lightning` and a process that trains exactly one step, cold
(page cache dropped before each) and warm (median of --runs), and the CPU throughput of the same loop
(benchmarks/overhead_workload.py), sides alternated so drift hits all. Root only (chroot, mounts, drop_caches).
Writes benchmarks/results/<host>-<date>-container.json. `make bench-container`.
"""
import argparse
import contextlib
import datetime
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = (HERE / "overhead_workload.py").read_text()
PROBES = {"pass": ["-c", "pass"], "import torch": ["-c", "import torch"],
          "import torch, lightning": ["-c", "import torch, pytorch_lightning"]}
IMAGE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the images' PATH


def seconds(command) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


@contextlib.contextmanager
def sandbox(image: str):
    """The SIF's root file system as a directory, with /proc, /sys and /dev bound in as Apptainer binds them."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("CT_BENCH_TMP", "/var/tmp")) as tmp:
        root = Path(tmp) / "rootfs"
        subprocess.run(["apptainer", "build", "--sandbox", str(root), image], check=True, capture_output=True)
        mounted = []
        try:
            for name in ("proc", "sys", "dev"):
                subprocess.run(["mount", "--rbind", f"/{name}", str(root / name)], check=True)
                mounted.append(root / name)
            yield root
        finally:
            for path in mounted:
                subprocess.run(["umount", "-R", str(path)], check=False)
            subprocess.run(["rm", "-rf", str(root)], check=False)


@contextlib.contextmanager
def instance(image: str):
    """One running instance of the SIF: every exec into it shares its one SquashFS mount, and so its page cache."""
    name = f"ct-bench-{os.getpid()}"
    subprocess.run(["apptainer", "instance", "start", "--cleanenv", "--no-home", image, name], check=True,
                   capture_output=True)
    try:
        yield f"instance://{name}"
    finally:
        subprocess.run(["apptainer", "instance", "stop", name], check=False, capture_output=True)


APPTAINER = ["apptainer", "exec", "--cleanenv", "--no-home"]  # as the job templates run a rank


def outside(root: Path) -> list:
    """The SIF's own Python, run from its files without the container."""
    return ["chroot", str(root), "/usr/bin/env", "-i", f"PATH={IMAGE_PATH}", "HOME=/root", "python"]


def sides(image: str, root: Path, running: str, variants: dict) -> dict:
    found = {"outside (chroot into the SIF's files)": outside(root),
             f"inside ({Path(image).name}, as jobs run it)": [*APPTAINER, image, "python"],
             "inside (the same files as a sandbox directory)": [*APPTAINER, str(root), "python"],
             "inside (exec into a running instance of the SIF)": ["apptainer", "exec", "--cleanenv", running, "python"]}
    return {**found, **{f"inside ({name})": [*APPTAINER, path, "python"] for name, path in variants.items()}}


def measure(sides: dict, runs: int, steps: int, threads: int) -> dict:
    probes = {**PROBES, "one training step": ["-c", WORKLOAD, "1", str(threads), "0"]}
    result = {name: {"cold_s": {}, "warm_s": {p: [] for p in probes}, "samples_per_s": []} for name in sides}
    for name, python in sides.items():
        for probe, args in probes.items():
            drop_page_cache()
            result[name]["cold_s"][probe] = round(seconds([*python, *args]), 2)
    for _ in range(runs):  # alternated: every side once, then again
        for name, python in sides.items():
            for probe, args in probes.items():
                result[name]["warm_s"][probe].append(seconds([*python, *args]))
            ran = subprocess.run([*python, "-c", WORKLOAD, str(steps), str(threads)], check=True, capture_output=True,
                                 text=True)
            result[name]["samples_per_s"].append(json.loads(ran.stdout.strip().splitlines()[-1])["samples_per_s"])
    for side in result.values():
        side["warm_s"] = {p: round(statistics.median(v), 2) for p, v in side["warm_s"].items()}
        side["samples_per_s"] = round(statistics.median(side["samples_per_s"]), 1)
    return result


def at_once(python: list, ranks: int) -> float:
    """Seconds until `ranks` processes, started together from one parent as srun starts a node's tasks, have all
    imported torch and Lightning."""
    started = time.perf_counter()
    procs = [subprocess.Popen([*python, *PROBES["import torch, lightning"]], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(ranks)]
    assert all(p.wait() == 0 for p in procs)
    return time.perf_counter() - started


def ranks_at_once(image: str, root: Path, ranks: int, runs: int) -> dict:
    """A node's ranks starting together: each its own SquashFS mount (as jobs run them), one mount shared by all
    (`--sharens`, Apptainer >= 1.3: ranks launched by one parent join the first one's container, as the trainer's
    srun ranks do; benchmarks/rank_start.py times it at 1 to 8 ranks), and outside."""
    sides = {"outside": outside(root), "a mount per rank": [*APPTAINER, image, "python"],
             "one mount per node (--sharens)": [*APPTAINER, "--sharens", image, "python"]}
    found = {name: [] for name in sides}
    for _ in range(runs):
        for name, python in sides.items():
            found[name].append(at_once(python, ranks))
    return {"ranks": ranks, "warm_s": {name: round(statistics.median(v), 2) for name, v in found.items()}}


def compared(result: dict) -> dict:
    """Each inside side against outside: warm seconds above it per probe, throughput as a ratio."""
    outside = next(v for k, v in result.items() if k.startswith("outside"))
    return {name: {"warm_extra_s": {p: round(side["warm_s"][p] - outside["warm_s"][p], 2) for p in side["warm_s"]},
                   "throughput_ratio": round(side["samples_per_s"] / outside["samples_per_s"], 3)}
            for name, side in result.items() if not name.startswith("outside")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image", required=True, help="the SIF jobs run (images/cpu.sif, images/cuda12.8.sif)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=SIF",
                   help="another SIF of the same files (e.g. packed with zstd)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--ranks", type=int, default=4, help="ranks started together on one node (ranks_at_once)")
    p.add_argument("--out-dir", default=str(HERE / "results"))
    args = p.parse_args()
    started, load = time.time(), os.getloadavg()[0]
    with sandbox(args.image) as root, instance(args.image) as running:
        result = measure(sides(args.image, root, running, dict(v.split("=", 1) for v in args.variant)), args.runs,
                         args.steps, args.threads)
        together = ranks_at_once(args.image, root, args.ranks, args.runs)
    summary = {
        "host": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(), "threads": args.threads, "image": args.image, "runs": args.runs,
        "sides": result, "against_outside": compared(result), "ranks_at_once": together,
        "total_s": round(time.time() - started, 1),
        "load_average_at_start": round(load, 2),
        "note": "outside = chroot into the SIF's own files: the same Python, torch and bytecode on both sides",
    }
    out = Path(args.out_dir) / f"{socket.gethostname()}-{datetime.date.today().isoformat()}-container.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["against_outside"], indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
