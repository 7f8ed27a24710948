"""Data sets as images (issue 28): a data set of many small files read from a plain directory against the same files
packed into one SquashFS image (the project's own packer, cluster_train/host/data/pack.py) and bound into the container.

A deterministic data set is generated (default 100,000 files of 2-4 KiB in 1000 folders, like the frames of 1000
videos; random bytes, so incompressible like JPEG frames), packed twice (time, size, and whether both packs give the
same sha256), then read whole, every file stat-ed, opened and read, by a small reader (READER, below) that reports its
own counts and time, from three sides:

  - the directory on the host, no container;
  - the directory bound into the container (`-B DIR:/data:ro`), so that the container is not the only difference;
  - the image bound into the container (`-B IMG:/data:image-src=/`, Apptainer's image bind).

Each side cold (page cache dropped first) and warm (median of --runs). What the host file system serves in each case
is counted separately, in runs of their own: fanotify (a mark on the whole file system, kept to the data set's inodes
and the image file's) counts the host files and folders opened, and, where strace is installed, `strace -f -c` counts
the open and stat calls the processes make. Last, the start of a job that stages the image (copy to a node-local
folder, sha256 checked on arrival in the same pass) against one that binds the shared image: seconds until the first
file is read. Root only (drop_caches, fanotify, the kernel's SquashFS mounts): without it the bench says so and
writes nothing, so that `make bench` goes on.
Writes benchmarks/results/<host>-<date>-data.json. `make bench-data`.
"""
import argparse
import ctypes
import datetime
import hashlib
import json
import os
import random
import re
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from cluster_train.host.data.pack import squash  # noqa: E402  (the project's packer: mksquashfs -reproducible)
from cluster_train.host.images.store import sha256_file  # noqa: E402

APPTAINER = ["apptainer", "exec", "--cleanenv", "--no-home"]  # as the job templates run a rank
TRACED = "openat,open,newfstatat,statx,stat,lstat"

# The reader: walks the tree in name order, stats, opens and reads every file; prints its own counts, time and CPU
# time as one JSON line. `--first`: the first file only (a job's start); `--twice`: a second pass in the same process
# (a training's second epoch, on the same mount). Passed with `python3 -c`, so it adds no file to count.
READER = r'''
import json, os, resource, sys, time
def mount_of(path):
    best = ("", "?", "?")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            point = left.split()[4]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
                best = (point, right.split()[0], right.split()[1])
    return {"fs_type": best[1], "source": best[2]}
def one_pass(root, first):
    n = {"files": 0, "dirs": 0, "opens": 0, "stats": 0, "bytes": 0}
    def walk(folder):
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        n["dirs"] += 1
        n["opens"] += 1
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if walk(e.path):
                    return True
                continue
            os.stat(e.path)
            n["stats"] += 1
            with open(e.path, "rb", buffering=0) as f:
                n["opens"] += 1
                n["bytes"] += len(f.read())
            n["files"] += 1
            if first:
                return True
        return False
    usage, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    walk(root)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {**n, "wall_s": round(time.perf_counter() - started, 4), "user_s": round(after.ru_utime - usage.ru_utime, 2),
            "sys_s": round(after.ru_stime - usage.ru_stime, 2)}
def main(root, first, passes):
    found = [one_pass(root, first) for _ in range(passes)]
    out = {**found[0], **mount_of(os.path.realpath(root))}
    if passes > 1:
        out["second_pass_s"], out["second_pass_sys_s"] = found[1]["wall_s"], found[1]["sys_s"]
    print(json.dumps(out))
main(sys.argv[-1], "--first" in sys.argv, 2 if "--twice" in sys.argv else 1)
'''


def drop_page_cache() -> bool:
    """sync, then drop the page cache, dentries and inodes; False where that is not allowed (not root)."""
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def disk_reads(path: Path) -> tuple:
    """(reads completed, bytes read) of the block device that holds `path`, from /proc/diskstats (machine-wide)."""
    dev = os.stat(path).st_dev
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if int(p[0]) == os.major(dev) and int(p[1]) == os.minor(dev):
                return int(p[3]), int(p[5]) * 512
    return 0, 0


def generate(root: Path, files: int, dirs: int, min_bytes: int, max_bytes: int, seed: int) -> dict:
    """`files` files of min_bytes..max_bytes random bytes in `dirs` folders, the same bytes for the same seed; their
    inodes (fanotify's counts are kept to them), apparent and allocated sizes."""
    rng = random.Random(seed)
    started = time.perf_counter()
    inodes = {"files": set(), "dirs": {os.stat(root).st_ino}}
    apparent = allocated = 0
    per_dir, extra = divmod(files, dirs)
    for d in range(dirs):
        folder = root / f"video_{d:04d}"
        folder.mkdir()
        st = os.stat(folder)
        inodes["dirs"].add(st.st_ino)
        allocated += st.st_blocks * 512
        for i in range(per_dir + (d < extra)):
            data = rng.randbytes(rng.randint(min_bytes, max_bytes))
            fd = os.open(folder / f"frame_{i:05d}.jpg", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
                st = os.fstat(fd)
            finally:
                os.close(fd)
            inodes["files"].add(st.st_ino)
            apparent += len(data)
            allocated += st.st_blocks * 512
    subprocess.run(["sync"], check=False)
    return {"files": files, "dirs": dirs, "file_bytes": [min_bytes, max_bytes], "seed": seed,
            "apparent_bytes": apparent, "allocated_bytes": allocated,
            "generate_s": round(time.perf_counter() - started, 1), "_inodes": inodes, "_dev": os.stat(root).st_dev}


def packed(src: Path, work: Path) -> (Path, dict):
    """The data set packed twice with the project's packer: the first from a cold page cache, the second warm."""
    times, digests, out = [], [], None
    for n in (1, 2):
        target = work / f"data-{n}.sqsh"
        if n == 1:
            drop_page_cache()
        started = time.perf_counter()
        squash(src, target)
        times.append(round(time.perf_counter() - started, 2))
        digests.append(sha256_file(target))
        if out is None:
            out = target
        else:
            target.unlink()
    version = subprocess.run(["mksquashfs", "-version"], capture_output=True, text=True).stdout.splitlines()
    return out, {"pack_s": times, "sha256": digests, "same_sha256": digests[0] == digests[1],
                 "image_bytes": out.stat().st_size, "mksquashfs": version[0] if version else "?"}


class OpenCounter:
    """fanotify on the whole file system that holds the data set: every open of one of the data set's files or
    folders, or of the image file, by any process (the container's included) while it runs. FAN_OPEN, no permission
    events: nothing is blocked. None where fanotify is not allowed (not root)."""

    def __init__(self, path: Path, dev: int, inodes: dict):
        self.dev, self.inodes, self.counts, self.fd = dev, inodes, {k: 0 for k in inodes}, -1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        # FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE, class NOTIF
        fd = libc.fanotify_init(0x1 | 0x2 | 0x10, os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "fanotify_init")
        # FAN_MARK_ADD | FAN_MARK_FILESYSTEM; FAN_OPEN | FAN_ONDIR
        if libc.fanotify_mark(fd, 0x1 | 0x100, 0x20 | 0x40000000, -100, str(path).encode()) < 0:
            os.close(fd)
            raise OSError(ctypes.get_errno(), "fanotify_mark")
        self.fd, self.stop = fd, threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _drain(self) -> bool:
        try:
            buf = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return False
        off = 0
        while off < len(buf):
            length, _, _, _, _, efd, _ = struct.unpack_from("IBBHQii", buf, off)
            if efd >= 0:
                st = os.fstat(efd)
                os.close(efd)
                if st.st_dev == self.dev:
                    for kind, found in self.inodes.items():
                        if st.st_ino in found:
                            self.counts[kind] += 1
            off += length
        return True

    def _read(self) -> None:
        while not self.stop.is_set():
            if select.select([self.fd], [], [], 0.1)[0]:
                self._drain()

    def close(self) -> dict:
        time.sleep(0.2)
        self.stop.set()
        self.thread.join()
        while self._drain():
            pass
        os.close(self.fd)
        return dict(self.counts)


def run_reader(command: list) -> dict:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {**found, "process_s": round(wall, 3)}


def strace_counts(command: list, work: Path) -> dict:
    """Calls per traced system call of the command and every process it starts (`strace -f -c`)."""
    out = work / "strace.txt"
    subprocess.run(["strace", "-f", "--seccomp-bpf", "-c", "-o", str(out), "-e", f"trace={TRACED}", *command],
                   check=True, capture_output=True)
    counts = {}
    for line in out.read_text().splitlines():
        p = line.split()
        if len(p) >= 5 and p[-1] in TRACED.split(",") and re.fullmatch(r"\d+", p[3]):
            counts[p[-1]] = int(p[3])
    out.unlink()
    return counts


def flagged(command: list, *flags: str) -> list:
    """The reader's command with flags before its last argument, the folder it reads."""
    return [*command[:-1], *flags, command[-1]]


def reading(sides: dict, runs: int, work: Path) -> dict:
    """Each side cold (page cache dropped first), then, once every side has run once more untimed (the cold runs
    dropped the others' pages), warm --runs times, sides alternated. Every run reads the tree twice in one process."""
    result = {}
    for name, command in sides.items():
        dropped = drop_page_cache()
        before = disk_reads(work)
        try:
            cold = run_reader(flagged(command, "--twice"))
        except Exception as e:  # a side that cannot run is a row naming its error, the others still run
            result[name] = {"command": " ".join(command), "error": str(e)}
            continue
        after = disk_reads(work)
        result[name] = {"command": " ".join(c if len(c) < 200 else "READER" for c in command),
                        "cold": {**cold, "page_cache_dropped": dropped, "disk_reads": after[0] - before[0],
                                 "disk_read_mb": round((after[1] - before[1]) / 1e6, 1)},
                        "warm_runs": []}
    ran = {name: command for name, command in sides.items() if "error" not in result[name]}
    for command in ran.values():
        run_reader(command)
    for _ in range(runs):
        for name, command in ran.items():
            result[name]["warm_runs"].append(run_reader(flagged(command, "--twice")))
    for name in ran:
        side = result[name]
        runs_ = side.pop("warm_runs")
        side["warm"] = {**{k: v for k, v in runs_[0].items() if not k.endswith("_s")},
                        **{k: round(statistics.median(r[k] for r in runs_), 3) for k in runs_[0] if k.endswith("_s")},
                        "wall_s_runs": [r["wall_s"] for r in runs_]}
    return result


def host_side(sides: dict, work: Path, generated: dict, image: Path, use_strace: bool) -> dict:
    """What the host file system serves per side (fanotify), and the calls the processes make (strace), warm."""
    inodes = {"data set files": generated["_inodes"]["files"], "data set folders": generated["_inodes"]["dirs"],
              "image file": {os.stat(image).st_ino}}
    result = {}
    for name, command in sides.items():
        row = {}
        try:
            counter = OpenCounter(work, generated["_dev"], inodes)
        except OSError as e:
            row["host_opens"] = None
            row["host_opens_error"] = str(e)
        else:
            try:
                run_reader(command)
            except Exception as e:
                row["error"] = str(e)
            row["host_opens"] = counter.close()
        if use_strace:
            try:
                row["syscalls"] = strace_counts(command, work)
            except Exception as e:
                row["syscalls_error"] = str(e)
        result[name] = row
    return result


def stage(src: Path, dst: Path, expected: str) -> None:
    """Copy `src` to `dst` and check its sha256 in one pass (read once: write and hash each block); a copy that
    arrives different is removed and refused."""
    digest, block = hashlib.sha256(), bytearray(4 << 20)
    view = memoryview(block)
    with open(src, "rb", buffering=0) as s, open(dst, "wb", buffering=0) as d:
        while n := s.readinto(block):
            digest.update(view[:n])
            d.write(view[:n])
    if digest.hexdigest() != expected:
        dst.unlink()
        raise RuntimeError(f"{dst}: sha256 {digest.hexdigest()} on arrival, expected {expected}")


def starts(shared: Path, local_dir: Path, expected: str, sif: str, runs: int) -> dict:
    """A job's start to its first file: staged (copy to node-local + sha256, then bind) against unstaged (bind the
    shared image). Cold once each (page cache dropped), then warm --runs times alternated."""
    def unstaged() -> dict:
        started = time.perf_counter()
        first = run_reader([*APPTAINER, "-B", f"{shared}:/data:image-src=/", sif, "python3", "-c", READER,
                            "--first", "/data"])
        return {"total_s": round(time.perf_counter() - started, 3), "first_file_s": first["process_s"],
                "files_read": first["files"]}

    def staged() -> dict:
        local = local_dir / shared.name
        local.unlink(missing_ok=True)
        started = time.perf_counter()
        stage(shared, local, expected)
        copied = time.perf_counter()
        first = run_reader([*APPTAINER, "-B", f"{local}:/data:image-src=/", sif, "python3", "-c", READER,
                            "--first", "/data"])
        done = time.perf_counter()
        local.unlink()
        return {"total_s": round(done - started, 3), "copy_and_sha256_s": round(copied - started, 3),
                "first_file_s": round(done - copied, 3), "files_read": first["files"]}

    ways = {"unstaged (bind the shared image)": unstaged,
            "staged (copy + sha256 to node-local, then bind)": staged}
    result = {}
    for name, way in ways.items():
        dropped = drop_page_cache()
        try:
            result[name] = {"cold": {**way(), "page_cache_dropped": dropped}, "warm_runs": []}
        except Exception as e:  # e.g. no image binds without root and squashfuse: a row naming the error
            result[name] = {"error": str(e)}
    ran = {name: way for name, way in ways.items() if "error" not in result[name]}
    for _ in range(runs):
        for name, way in ran.items():
            result[name]["warm_runs"].append(way())
    for name in ran:
        row = result[name]
        runs_ = row.pop("warm_runs")
        row["warm"] = {k: round(statistics.median(r[k] for r in runs_), 3) for k in runs_[0] if k.endswith("_s")}
        row["warm"]["total_s_runs"] = [r["total_s"] for r in runs_]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--dirs", type=int, default=None, help="folders (default: one per 100 files)")
    p.add_argument("--min-bytes", type=int, default=2048)
    p.add_argument("--max-bytes", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image", default="images/cpu.sif", help="the container the readers run in")
    p.add_argument("--runs", type=int, default=3, help="warm runs per side (the median is reported)")
    p.add_argument("--no-strace", action="store_true", help="skip the strace counts even where strace is installed")
    p.add_argument("--work-dir", default=os.environ.get("CT_BENCH_TMP", "/var/tmp"),
                   help="where the data set, its image and the staged copy are written (deleted at the end)")
    p.add_argument("--out-dir", default=str(HERE / "results"))
    args = p.parse_args()
    if os.geteuid() != 0:  # without root Apptainer may unpack the whole SIF for every exec: minutes, and no cold runs
        print("benchmarks/data_files.py: root only (drop_caches, fanotify, the kernel's image mounts); skipped",
              file=sys.stderr)
        return
    dirs = args.dirs or max(1, args.files // 100)
    use_strace = not args.no_strace and shutil.which("strace") is not None
    started, load = time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ct-bench-data-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        src = work / "frames"
        src.mkdir()
        generated = generate(src, args.files, dirs, args.min_bytes, args.max_bytes, args.seed)
        print(f"generated {args.files} files in {dirs} folders ({generated['apparent_bytes'] / 1e6:.1f} MB) in "
              f"{generated['generate_s']} s", file=sys.stderr)
        shared_dir, local_dir = work / "shared", work / "node-local"
        shared_dir.mkdir(), local_dir.mkdir()
        image, pack = packed(src, shared_dir)
        print(f"packed in {pack['pack_s']} s: {pack['image_bytes'] / 1e6:.1f} MB, same sha256: {pack['same_sha256']}",
              file=sys.stderr)
        sides = {"host directory (no container)": [sys.executable, "-c", READER, str(src)],
                 "container, directory bound (-B DIR:/data:ro)":
                     [*APPTAINER, "-B", f"{src}:/data:ro", args.image, "python3", "-c", READER, "/data"],
                 "container, image bound (-B IMG:/data:image-src=/)":
                     [*APPTAINER, "-B", f"{image}:/data:image-src=/", args.image, "python3", "-c", READER, "/data"]}
        read = reading(sides, args.runs, work)
        print(json.dumps({k: {w: v.get(w, {}).get("wall_s") for w in ("cold", "warm")} for k, v in read.items()}),
              file=sys.stderr)
        counted = host_side(sides, work, generated, image, use_strace)
        for name, row in counted.items():
            read.setdefault(name, {})["host_side"] = row
        start = starts(image, local_dir, pack["sha256"][0], args.image, args.runs)
    generated.pop("_inodes"), generated.pop("_dev")
    summary = {
        "host": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(), "image": args.image, "runs": args.runs,
        "apptainer": subprocess.run(["apptainer", "--version"], capture_output=True, text=True).stdout.strip(),
        "data_set": generated,
        "pack": {**pack, "image_vs_apparent": round(pack["image_bytes"] / generated["apparent_bytes"], 3),
                 "image_vs_allocated": round(pack["image_bytes"] / generated["allocated_bytes"], 3)},
        "read_every_file": read, "job_start": {"image_bytes": pack["image_bytes"], **start},
        "strace": shutil.which("strace") is not None and not args.no_strace,
        "total_s": round(time.time() - started, 1), "load_average_at_start": round(load, 2),
        "notes": [
            "one machine: the 'shared' image and the 'node-local' copy are on the same disk, so staging here shows "
            "the copy + sha256 cost without the network file system a cluster's shared storage adds (or saves)",
            "cold: sync and drop_caches before the run (page_cache_dropped says whether it worked); warm: the image "
            "file's bytes (or the directory's files) in the page cache, but every apptainer exec mounts the image "
            "afresh, so SquashFS reads and decodes its metadata and blocks again each time",
            "host_opens (fanotify on the host file system, kept to the data set's inodes and the image file's): "
            "what the host file system serves; syscalls (strace -f -c): the calls the processes make, the same in "
            "every case, since inside the container the reader opens each file too: with the image, those opens and "
            "stats are answered by the kernel's SquashFS driver from the one open image file (through a loop "
            "device), not by the host file system",
            "wall_s: the reader's first pass over the tree; second_pass_s: a second pass in the same process, on the "
            "same mount (a training's second epoch); process_s: the whole process, the container's start and end "
            "included; user_s / sys_s: the reader's CPU time in the first pass",
            "disk_reads / disk_read_mb (cold): the block device's counters over the cold run, machine-wide (the "
            "container image's own pages included)",
        ],
    }
    out = Path(args.out_dir) / f"{socket.gethostname()}-{datetime.date.today().isoformat()}-data.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({"pack": summary["pack"], "job_start": summary["job_start"]}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
