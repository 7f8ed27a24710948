"""One W&B offline run directory per tracked run, whatever the number of segments (issue 31).

W&B's client cannot continue an offline run: every process start writes a new `offline-run-<time>-<id>` directory
(wandb PR #12110 is still open), so a run requeued twice would leave three. `fold` gathers them into the first one:
each segment's transaction log is kept as a part (`segments/NNN.wandb`, below the directory, where `wandb sync` does
not look) and the run's `run-<id>.wandb` is rebuilt from the parts as one record stream: the first segment's header
and run record, every segment's history, summary, config and output, and the last segment's exit. Written by hand
because no client reads or writes these logs from Python any more (0.31 moved both into wandb-core); the format is
W&B's LevelDB log: a 7-byte file header, then 32 KiB blocks of chunks, each headed by crc32(type + data), length,
type. Torch-free: the job's rank 0 folds, and so does `run-cluster sync` on the login node.
"""
import os
import re
import shutil
import struct
import zlib
from pathlib import Path
from typing import Iterator, List, Optional

from cluster_train.shared.durable import atomic_write_bytes

FILE_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
CHUNK = 7  # crc32 (4), length (2), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
PARTS = "segments"
ONCE_AT_THE_START = {"header", "run"}  # a later segment's are the resumed process's own
ONCE_AT_THE_END = {"exit", "final", "footer"}  # an earlier segment's would end the run mid-stream


def read_records(path: Path) -> Iterator[bytes]:
    """Each record's bytes, in order; stops at a torn tail (a segment killed mid-write) or a chunk whose crc fails."""
    data, pos, pending = Path(path).read_bytes(), len(FILE_HEADER), b""
    if data[:len(FILE_HEADER)] != FILE_HEADER:
        raise ValueError(f"{path} is not a W&B transaction log (header {data[:7]!r})")
    while pos + CHUNK <= len(data):
        left = BLOCK - pos % BLOCK
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK]) if left >= CHUNK else (0, 0, 0)
        payload = data[pos + CHUNK:pos + CHUNK + length]
        if not (length or kind):  # the zero padding at a block's end
            pos += left
            continue
        if len(payload) < length or crc != zlib.crc32(payload, zlib.crc32(bytes([kind]))):
            return
        pending, pos = pending + payload, pos + CHUNK + length
        if kind in (FULL, LAST):
            yield pending
            pending = b""


def write_records(path: Path, records: List[bytes]) -> None:
    """A transaction log holding `records`, replacing `path` whole (a reader sees the old log or the new)."""
    out, pos = bytearray(FILE_HEADER), len(FILE_HEADER)
    for record in records:
        first = True
        while True:
            left = BLOCK - pos % BLOCK
            if left < CHUNK:
                out += b"\0" * left
                pos += left
                continue
            piece, record = record[:left - CHUNK], record[left - CHUNK:]
            kind = (FULL if not record else FIRST) if first else (LAST if not record else MIDDLE)
            out += struct.pack("<IHB", zlib.crc32(piece, zlib.crc32(bytes([kind]))), len(piece), kind) + piece
            pos, first = pos + CHUNK + len(piece), False
            if not record:
                break
    atomic_write_bytes(path, bytes(out))


def one_stream(parts: List[Path]) -> List[bytes]:
    """The parts' records as one run's: numbered in order, one start, one end."""
    from wandb.proto import wandb_internal_pb2

    records = []
    for i, part in enumerate(parts):
        for raw in read_records(part):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            if (i and kind in ONCE_AT_THE_START) or (i < len(parts) - 1 and kind in ONCE_AT_THE_END):
                continue
            record.num = len(records) + 1
            records.append(record.SerializeToString())
    return records


def segment_dirs(wandb_dir: Path, run_id: str) -> List[Path]:
    """The run's offline directories in the order their processes started (W&B adds -1, -2 within one second)."""
    name = re.compile(rf"offline-run-(\d{{8}}_\d{{6}})-{re.escape(run_id)}(?:-(\d+))?")
    found = [(m.group(1), int(m.group(2) or 0), d) for d in Path(wandb_dir).glob(f"offline-run-*-{run_id}*")
             if (m := name.fullmatch(d.name)) and d.is_dir()]
    return [d for *_, d in sorted(found)]


def fold(wandb_dir: Path, run_id: str, leave_last: bool = False) -> Optional[Path]:
    """Gather the run's offline directories into the first; returns it (None: the run has none). `leave_last`: the
    newest directory is a running segment's (its process still writes there), left alone. Safe to repeat, and to be
    killed part way: a segment's log is moved into the parts before its directory goes, and the run's log is rebuilt
    from all the parts whenever one is newer than it."""
    dirs = segment_dirs(wandb_dir, run_id)
    later = dirs[1:-1] if leave_last else dirs[1:]
    if not dirs or not (later or (dirs[0] / PARTS).is_dir()):
        return dirs[0] if dirs else None
    keep, log = dirs[0], dirs[0] / f"run-{run_id}.wandb"
    parts = keep / PARTS
    parts.mkdir(exist_ok=True)
    if not any(parts.glob("*.wandb")) and log.is_file():
        shutil.copyfile(log, parts / ".first.tmp")
        os.replace(parts / ".first.tmp", parts / "001.wandb")
    for each in later:
        take_in(keep, each, parts / f"{len(list(parts.glob('*.wandb'))) + 1:03d}.wandb", run_id)
    found = sorted(parts.glob("*.wandb"))
    if found and (not log.is_file() or max(p.stat().st_mtime for p in found) >= log.stat().st_mtime):
        write_records(log, one_stream(found))
        log.with_suffix(".wandb.synced").unlink(missing_ok=True)  # `wandb sync` marks a log it sent; this one grew
    point_links_at(Path(wandb_dir), keep)
    return keep


def take_in(keep: Path, later: Path, part: Path, run_id: str) -> None:
    """A later segment's log becomes a part; its files (media, requirements) and logs join the first directory's."""
    if (later / f"run-{run_id}.wandb").is_file():
        os.replace(later / f"run-{run_id}.wandb", part)
    for sub in ("files", "logs"):
        for path in sorted((later / sub).rglob("*")) if (later / sub).is_dir() else []:
            if path.is_file():
                rel = path.relative_to(later / sub)
                target = keep / sub / (f"{later.name}/{rel}" if sub == "logs" else rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
    shutil.rmtree(later)


def point_links_at(wandb_dir: Path, keep: Path) -> None:
    """W&B's latest-run and debug log links named the last segment's directory, which is gone."""
    for link, target in (("latest-run", keep.name), ("debug.log", f"{keep.name}/logs/debug.log"),
                         ("debug-internal.log", f"{keep.name}/logs/debug-internal.log")):
        path = wandb_dir / link
        if path.is_symlink():
            path.unlink()
            path.symlink_to(target)
