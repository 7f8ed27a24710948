"""`run-cluster data pack|import|push|pull|list|verify`: packed data sets in the data store, which lives inside the
image store a command uses (this checkout's images/, $CT_IMAGES, your settings' or a cluster file's `images:`;
`--cluster C`: that cluster's). One line per data image."""
import sys
from pathlib import Path
from typing import List, Optional

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import project
from cluster_train.host.data import pack, store, transport
from cluster_train.host.images.locations import STORE_FIX, command_store
from cluster_train.host.status_line import shown_progress
from cluster_train.host.usage import Parser

WRITES = ("pack", "import", "pull")  # the commands that add to the store


def parser() -> Parser:
    p = Parser(prog="run-cluster data", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    pk = sub.add_parser("pack", help="a directory becomes one reproducible SquashFS image, stored by sha256")
    pk.add_argument("dir", type=Path,
                    help="the directory that holds the data set (its contents become the image's root)")
    pk.add_argument("--name", help="the name experiments use (data.image: NAME); default: the directory's name")
    imp = sub.add_parser("import", help="a SquashFS file packed elsewhere enters the store under its sha256")
    imp.add_argument("file", type=Path)
    imp.add_argument("--name", help="its name here; default: the file's name without .sqsh")
    imp.add_argument("--expect-sha256", help="the digest the sender recorded; refused if the file's differs")
    push = sub.add_parser("push", help="push a stored data image to an OCI registry (tagged with its digest too)")
    push.add_argument("image", help="a name or sha256")
    push.add_argument("reference", help="oras://REGISTRY/REPO[:TAG]")
    pull = sub.add_parser("pull", help="pull a data image from an OCI registry into the store, its digest checked")
    pull.add_argument("reference", help="oras://REGISTRY/REPO:TAG (a push's sha256-<digest> tag names exactly one)")
    pull.add_argument("--name", required=True, help="its name here")
    pull.add_argument("--expect-sha256", help="the data image's digest (a run's manifest records it)")
    for command in (push, pull):
        command.add_argument("--plain-http", action="store_true", help="a registry without TLS (apptainer --no-https)")
    sub.add_parser("list", help="every data image of the store: name, digest, size, files, where it was packed from")
    ver = sub.add_parser("verify", help="recompute the digests of the stored data images and name any that changed")
    ver.add_argument("image", nargs="?", help="only this data image (a name or sha256)")
    for command in sub.choices.values():
        command.add_argument("--cluster", help="that cluster's store (its file's images:, your settings)")
    return p


def pack_dir(src: Path, name: str, root: Path) -> int:
    """`data pack`: what it packs, mksquashfs's progress as a status line (plain lines in a pipe), what it stored."""
    store.check_name(name)
    files, size = pack.contents(src)
    print(f"packing {files} files ({size / 1e6:.1f} MB) of {src} as data image {name!r}...", file=sys.stderr)
    with shown_progress() as shown:
        entry, new = pack.pack(src, name, root, shown)
    print(f"{entry.name}: sha256:{entry.sha256} ({entry.size / 1e6:.1f} MB, {entry.files} files) "
          f"{'stored' if new else 'already stored'} at {entry.path}")
    return 0


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)
    root = store.data_root(command_store(args.cluster))
    if args.command in WRITES:
        project.check_writable(root, "the data store", STORE_FIX)
    if args.command == "pack":
        return pack_dir(args.dir, args.name or args.dir.resolve().name, root)
    if args.command == "import":
        entry, new = store.admit(args.file, args.name or args.file.name.removesuffix(store.SUFFIX), root,
                                 args.expect_sha256)
        print(f"{'imported' if new else 'already in the store:'} {entry.name} sha256:{entry.sha256} -> {entry.path}")
        return 0
    if args.command == "push":
        entry = store.verified(args.image, root)
        with shown_progress() as shown:
            refs = transport.push(entry, args.reference, args.plain_http, shown)
        print(f"pushed data image {entry.name} sha256:{entry.sha256} -> {' and '.join(refs)}")
        return 0
    if args.command == "pull":
        with shown_progress() as shown:
            entry, new = transport.pull(args.reference, args.plain_http, args.name, args.expect_sha256, root, shown)
        print(f"{'pulled' if new else 'already in the store:'} {entry.name} sha256:{entry.sha256} -> {entry.path}")
        return 0
    if args.command == "list":
        return list_data(root)
    return verify(root, args.image)


def list_data(root: Path) -> int:
    found = store.records(root)
    for entry in found:
        gone = "" if Path(entry.path).is_file() else "  (gone from the store)"
        print(f"{entry.name:20s} sha256:{entry.sha256}  {entry.size / 2**20:8.1f} MiB  {entry.files:8d} files  "
              f"packed {entry.packed_at} from {entry.source}{gone}")
    if not found:
        print(f"no data images in {root}; pack one with bin/run-cluster data pack DIR --name NAME")
    return 0


def verify(root: Path, ref: Optional[str]) -> int:
    """One line per data image; exit 2 naming every one whose bytes no longer match their digest."""
    wanted = [e for e in store.records(root) if ref in (None, e.name, e.sha256, f"sha256:{e.sha256}")]
    if ref and not wanted:
        raise UserError(f"no data image {ref!r} in {root}; see bin/run-cluster data list")
    bad = []
    for entry in {e.sha256: e for e in wanted}.values():
        why = store.fault(entry)
        if why:
            bad.append(f"data image {entry.name} sha256:{entry.sha256}: {entry.path} {why}; restore it, or pack the "
                       f"data again")
        else:
            print(f"ok {entry.name} sha256:{entry.sha256}")
    raise_all([UserError(line) for line in bad])
    return 0
