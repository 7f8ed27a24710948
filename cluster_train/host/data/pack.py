"""`data pack`: a directory becomes one SquashFS file, the same bytes (so the same sha256) whenever the same names
hold the same contents, whatever the files' times, owners or the machine that packs.

mksquashfs does the work (the tool Apptainer itself uses for SIFs); what is written here is the reproducibility
(-reproducible orders and numbers entries the same way; every time zeroed; every file root-owned; no xattrs; every
mode normalised as git does: directories and executables 0755, other files 0644, so a `chmod 600` changes nothing and
every file is readable by the job's user) and the checks that keep a packed image readable: a symbolic link must
stay inside the directory, else the image would hold a link to nothing on the compute node."""
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host.data import store
from cluster_train.host.images.store import sha256_file
from cluster_train.host.progress import Meter, Report, ignore

REPRODUCIBLE = ["-noappend", "-reproducible", "-mkfs-time", "0", "-all-time", "0", "-all-root", "-no-xattrs",
                "-root-mode", "0755"]


def squash(src: Path, out: Path, report: Report = ignore, label: str = "packing", poll_s: float = 0.5) -> None:
    """Write `src`'s contents as the root of the SquashFS file `out` (replaced), reproducibly; the bytes written so
    far reported every poll_s (mksquashfs 4.5's own progress bar reaches a pipe or a pty only at its end)."""
    if shutil.which("mksquashfs") is None:
        raise UserError("mksquashfs is not installed; install squashfs-tools (apt-get install squashfs-tools)")
    modes = out.with_name(out.name + ".modes")
    meter = Meter(label)
    try:
        modes.write_bytes(mode_definitions(src))
        with tempfile.TemporaryFile("w+") as errors:
            squashing = subprocess.Popen(["mksquashfs", str(src), str(out), *REPRODUCIBLE, "-pf", str(modes),
                                          "-quiet"], stdout=subprocess.DEVNULL, stderr=errors)
            while squashing.poll() is None:
                report(meter.at(out.stat().st_size if out.exists() else 0))
                with contextlib.suppress(subprocess.TimeoutExpired):
                    squashing.wait(poll_s)  # returns as soon as it ends
            errors.seek(0)
            said = errors.read().strip().splitlines()[-1:]
    finally:
        modes.unlink(missing_ok=True)
    if squashing.returncode != 0:
        raise UserError(f"mksquashfs could not pack {src}: {said or squashing.returncode}")
    report(meter.at(out.stat().st_size, final=True))


def mode_definitions(src: Path) -> bytes:
    """mksquashfs pseudo definitions ("NAME m MODE UID GID": modify) giving every directory and file below `src` its
    normalised mode; a symbolic link has none of its own. Every character of a name but letters, digits and / is
    escaped with a backslash, as mksquashfs reads them."""
    lines = []
    for top, dirs, names in os.walk(src):
        for name in dirs + names:
            path = os.path.join(top, name)
            if os.path.islink(path):
                continue
            mode = 0o755 if os.path.isdir(path) or os.stat(path).st_mode & 0o111 else 0o644
            escaped = re.sub(rb"([^A-Za-z0-9/])", rb"\\\1", os.fsencode(os.path.relpath(path, src)))
            lines.append(escaped + b" m %o 0 0\n" % mode)
    return b"".join(lines)


def contents(src: Path) -> Tuple[int, int]:
    """(regular files, bytes) of a directory to pack; refused when it is missing or empty, or a symbolic link in it
    leads outside it."""
    if not src.is_dir():
        raise UserError(f"data directory {str(src)!r} does not exist or is not a directory; name the directory "
                        f"that holds the data set")
    files = size = 0
    for top, dirs, names in os.walk(src):
        for name in dirs + names:
            path = Path(top) / name
            if "\n" in name:
                raise UserError(f"{str(path)!r} has a line break in its name, which mksquashfs cannot keep; rename it")
            if path.is_symlink():
                outside(path, src)
            elif name in names:
                files += 1
                size += path.stat().st_size
    if files == 0:
        raise UserError(f"data directory {str(src)!r} holds no files; name the directory that holds the data set")
    return files, size


def outside(link: Path, src: Path) -> None:
    target = os.path.realpath(link)
    top = os.path.realpath(src)
    if os.path.isabs(os.readlink(link)) or not (target == top or target.startswith(top + os.sep)):
        raise UserError(f"{link} -> {os.readlink(link)} leads outside {src}: in the image it would lead nowhere; "
                        f"make it a relative link inside {src}, or pack the directory it leads into")


def pack(src: Path, name: str, root: Path, report: Report = ignore) -> Tuple[store.DataRecord, bool]:
    """Pack `src` into the data store at `root` under `name`, reporting how far mksquashfs is; the record of the
    stored image, and whether it is new (the same bytes may be stored already)."""
    store.check_name(name)
    files, _ = contents(src)
    where = root / store.STORE
    where.mkdir(parents=True, exist_ok=True)
    tmp = where / f".{name}.{os.getpid()}.tmp"
    try:
        squash(src, tmp, report, f"packing {name}")
        return store.add(name, tmp, sha256_file(tmp), root, str(src.resolve()), files)
    finally:
        tmp.unlink(missing_ok=True)
