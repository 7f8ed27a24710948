"""Files written so that a kill or a full disk never leaves half of one (torch-free: the checkpoints, the trackers'
state and W&B's folded logs use it inside the image; see
cluster_train/image/checkpoint_io.py for the checkpoints themselves)."""
import errno
import os
import shutil
import sys
from pathlib import Path

from cluster_train.shared.exit_codes import DISK_FULL

FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def disk_full(path, err: OSError):
    """Print the one line and exit DISK_FULL when err is a full disk; otherwise return (the caller re-raises)."""
    if err.errno not in FULL_DISK:
        return
    try:
        free = shutil.disk_usage(Path(path).parent).free // 2**20
    except OSError:
        free = "?"
    print(f"[cluster-train] error: disk full writing {path} ({free} MB free); free space or move the run",
          file=sys.stderr, flush=True)
    raise SystemExit(DISK_FULL)


def fsync_dir(folder) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path, data: bytes) -> None:
    """`data` in a temporary file beside `path`, fsynced and renamed over it; the directory fsynced after."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        disk_full(path, err)
        raise
    finally:
        tmp.unlink(missing_ok=True)
