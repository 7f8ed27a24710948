"""`run-cluster images list|import|verify`: the image store seen from a login node, torch-free, one line per image.

A SIF built elsewhere (a workstation, CI) and copied here by scp, rsync or Globus enters the store with `images
import`, under its sha256, checked first: a SIF header, every byte its header promises (a truncated copy is
refused), cluster-train's labels (its flavor), and the digest the sender gave (`--expect-sha256`). The store is
$CT_IMAGES, else `images:` of the settings file, else images/ of this checkout (`--cluster C`: that cluster's store,
which its file may point at a group directory).
"""
import argparse
import json
import struct
import subprocess
from pathlib import Path
from typing import List, Optional

from train.errors import UserError, raise_all
from train.host import images, project, settings
from train.host.submit import store_of

SIF_MAGIC = b"SIF_MAGIC"  # bytes 32-40 of every SIF, after its launcher line
FLAVOR_LABEL = "org.cluster-train.flavor"
COMMIT_LABEL = "org.cluster-train.git-commit"


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UserError(f"{message}; see {self.prog} --help")


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster images", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    sub.add_parser("list", help="every image of the store: flavor, digest, size, when and from which commit built")
    imp = sub.add_parser("import", help="a SIF copied here enters the store under its sha256")
    imp.add_argument("sif", type=Path)
    imp.add_argument("--expect-sha256", help="the digest the sender recorded; refused if the file's differs")
    ver = sub.add_parser("verify", help="recompute the digests of the store's files and name any that changed")
    ver.add_argument("digest", nargs="?", help="only this image (sha256)")
    for command in sub.choices.values():
        command.add_argument("--cluster", help="that cluster's image store (its file's images:, your settings)")
    args = p.parse_args(argv)
    root = store_of(args.cluster) if args.cluster else project.images_dir(settings.load("").get("images"))
    if args.command == "list":
        return list_images(root)
    if args.command == "import":
        return import_image(args.sif, args.expect_sha256, root)
    return verify(root, args.digest)


def list_images(root: Path) -> int:
    found = images.records(root)
    for entry in found:
        where = "" if Path(entry.path).is_file() else "  (gone from the store)"
        print(f"{entry.flavor:9s} sha256:{entry.sha256}  {entry.size / 2**20:6.0f} MiB  stored {entry.built_at}  "
              f"commit {entry.git_commit or '-'}{where}")
    if not found:
        print(f"no images in {root}; build one (make image) or import one (bin/run-cluster images import FILE.sif)")
    return 0


def import_image(sif: Path, expect: Optional[str], root: Path) -> int:
    check_complete_sif(sif)
    labels = sif_labels(sif)
    if FLAVOR_LABEL not in labels:
        raise UserError(f"{sif} is a SIF but not one of cluster-train's images (no {FLAVOR_LABEL} label); build it "
                        f"with make image")
    digest = images.sha256_file(sif)
    if expect and digest != expect.removeprefix("sha256:"):
        raise UserError(f"{sif} has sha256 {digest}, not the expected {expect}; copy it again (it is damaged or "
                        f"another image)")
    entry, new = images.add(labels[FLAVOR_LABEL], sif, digest, root, labels.get(COMMIT_LABEL))
    print(f"{'imported' if new else 'already in the store:'} {entry.flavor} image sha256:{entry.sha256} "
          f"({entry.size / 2**20:.0f} MiB) -> {entry.path}")
    return 0


def check_complete_sif(sif: Path) -> None:
    """A SIF header, and every byte of the data its header says follows (scp and rsync leave truncated copies)."""
    if not sif.is_file():
        raise UserError(f"{sif} does not exist or is not a file; give the path of a .sif image")
    with sif.open("rb") as f:
        header = f.read(128)
    if len(header) < 128 or header[32:41] != SIF_MAGIC:
        raise UserError(f"{sif} is not a SIF image (no SIF header); give an image built by make image")
    data_offset, data_length = struct.unpack("<2q", header[112:128])
    size = sif.stat().st_size
    if size < data_offset + data_length:
        raise UserError(f"{sif} is truncated: {size} bytes of the {data_offset + data_length} its header describes; "
                        f"copy it again")


def sif_labels(sif: Path) -> dict:
    try:
        done = subprocess.run(["apptainer", "inspect", "--labels", "--json", str(sif)], capture_output=True, text=True)
    except FileNotFoundError:
        raise UserError("apptainer is not on PATH: it reads the image's labels; load it (module load apptainer)") from None
    try:
        return json.loads(done.stdout)["data"]["attributes"]["labels"] or {}
    except (ValueError, KeyError, TypeError):
        raise UserError(f"apptainer cannot read the labels of {sif}: "
                        f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}") from None


def verify(root: Path, digest: Optional[str]) -> int:
    """One line per image; exit 2 naming every store file whose bytes no longer match its digest."""
    wanted = [e for e in images.records(root) if digest in (None, e.sha256)]
    if digest and not wanted:
        raise UserError(f"no image sha256:{digest} in {root}; see bin/run-cluster images list")
    bad = []
    for entry in {e.sha256: e for e in wanted}.values():
        if not Path(entry.path).is_file():
            bad.append(f"{entry.flavor} sha256:{entry.sha256}: its store file {entry.path} is gone")
        elif images.sha256_file(entry.path) != entry.sha256:
            bad.append(f"{entry.flavor} sha256:{entry.sha256}: {entry.path} changed since it was stored")
        else:
            print(f"ok {entry.flavor} sha256:{entry.sha256}")
    raise_all([UserError(line) for line in bad])
    return 0
