"""Images through an OCI registry, with Apptainer's ORAS support (`apptainer push/pull oras://...`).

A SIF travels as one layer whose digest is the SIF's own sha256, so every push also tags the image with that digest
(`:sha256-<digest>`): whoever has a run's manifest can pull exactly its image by name, and the pulled bytes are
checked against the digest before they enter the store (`pull_into_store`, with every check of
cluster_train/host/images/sif.py). `plain_http` is Apptainer's `--no-https` (a registry on 127.0.0.1
or a lab's own without TLS).
"""
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import apptainer
from cluster_train.host.images import sif, store
from cluster_train.host.progress import Meter, Report, ignore

ORAS = re.compile(r"^oras://(?P<registry>[A-Za-z0-9.-]+(:\d+)?)/(?P<repo>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
                  r"(?P<ref>:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[0-9a-f]{64})?$")


def parse(reference: str) -> Dict[str, str]:
    found = ORAS.match(reference)
    if not found:
        raise UserError(f"{reference!r} is not an ORAS reference like oras://registry.example.org/lab/cluster-train"
                        f"[:tag]; images travel through OCI registries as oras://")
    return found.groupdict()


def content_reference(reference: str, sha256: str) -> str:
    """The reference that names exactly this image in that repository: its digest as the tag."""
    parts = parse(reference)
    return f"oras://{parts['registry']}/{parts['repo']}:sha256-{sha256}"


def push(sif: Path, sha256: str, reference: str, plain_http: bool, report: Report = ignore) -> List[str]:
    """Push to the digest tag, and to the reference's own tag if it has one; the references pushed. Apptainer says
    nothing of a push's bytes: they are read from what it has read of the file (/proc/PID/io), which it reads twice,
    once for its checksum, then to send it."""
    refs = list(dict.fromkeys([content_reference(reference, sha256)]
                              + ([reference] if parse(reference)["ref"] else [])))
    size = sif.stat().st_size
    for ref in refs:
        meter = Meter(f"pushing {sif.name} to {ref}", size)

        def tick(pid: int) -> None:
            nonlocal meter
            read = bytes_read(pid)
            if read is not None and read > size and meter.last.stage != "sending":
                meter = Meter(meter.last.label, size)  # the rate and time left of the sending alone
            if read is not None:
                report(meter.at(max(0, min(size, read - size)), "checksumming" if read <= size else "sending"))

        _checked("push", ref, apptainer.push(sif, ref, plain_http, tick))
        report(meter.at(size, final=True))
    return refs


def bytes_read(pid: int) -> Optional[int]:
    """How many bytes a process has read (Linux: rchar of /proc/PID/io); None where that cannot be read."""
    try:
        return int(Path(f"/proc/{pid}/io").read_text().split("rchar:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None


def pull(reference: str, plain_http: bool, into: Path, report: Report = ignore) -> Path:
    """Pull into a temporary file of `into` (the store's file system, so it is renamed, not copied, into place);
    the bytes that arrived reported as they grow (Apptainer downloads into its TMPDIR, made here, then copies)."""
    parse(reference)
    into.mkdir(parents=True, exist_ok=True)
    tmp = into / f".pull.{abs(hash(reference))}.tmp.sif"
    meter = Meter(f"pulling {reference}")
    with tempfile.TemporaryDirectory(dir=into, prefix=".pull-") as staging:
        def tick(_: int) -> None:  # downloading into staging, then copying into tmp
            report(meter.at(max(tmp.stat().st_size if tmp.exists() else 0, bytes_under(Path(staging)))))

        done = apptainer.pull(tmp, reference, plain_http, tick, env={**os.environ, "TMPDIR": staging})
    _checked("pull", reference, done)
    report(meter.at(tmp.stat().st_size, final=True))
    return tmp


def bytes_under(top: Path) -> int:
    return sum(path.stat().st_size for path in top.rglob("*") if path.is_file())


def pull_into_store(reference: str, plain_http: bool, expect: Optional[str], root: Path,
                    report: Report = ignore) -> Tuple[store.ImageRecord, bool]:
    """(the image, whether it is new): none pulled when the store already holds the expected digest; else pulled
    beside the store and admitted with every check, its reference recorded as where it was pushed."""
    known = store.find(expect.removeprefix("sha256:"), root) if expect else None
    if known is not None:
        return known, False
    tmp = pull(reference, plain_http, root / store.STORE, report)
    try:
        return sif.admit(tmp, expect, root, [{"reference": reference, "plain_http": plain_http}], owned=True,
                         shown=f"the image pulled from {reference}")
    finally:
        tmp.unlink(missing_ok=True)


def _checked(command: str, reference: str, done: subprocess.CompletedProcess) -> None:
    if done.returncode != 0:
        said = [line for line in done.stderr.strip().splitlines() if line.strip()] or [f"exit status {done.returncode}"]
        raise UserError(f"apptainer {command} {reference} failed: {said[-1].removeprefix('FATAL:').strip()}")
