"""`run-cluster images list|import|push|pull|verify|sign|derive`: the image store seen from a login node, torch-free,
one line per image.

A SIF built elsewhere (a workstation, CI) and copied here by scp, rsync or Globus enters the store with `images
import`, under its sha256, checked first (cluster_train/host/images/sif.py): a SIF header, every byte its header
promises (a truncated copy is refused), cluster-train's labels (its flavor), and the digest the sender gave
(`--expect-sha256`). The store is $CT_IMAGES, else `images:` of the settings file, else images/ of this checkout
(`--cluster C`: that cluster's store, which its file may point at a group directory). `images derive` builds a project's
packages on top of a stored image (cluster_train/host/images/derive.py).
"""
from pathlib import Path
from typing import List, Optional

from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import project
from cluster_train.host.images import derive, oci, signing, store
from cluster_train.host.images.locations import STORE_FIX, command_store
from cluster_train.host.images.sif import admit
from cluster_train.host.status_line import shown_progress
from cluster_train.host.usage import Parser

WRITES = ("import", "pull", "sign", "derive")  # the commands that add to the store


def parser() -> Parser:
    p = Parser(prog="run-cluster images", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    sub.add_parser("list", help="every image of the store: flavor, digest, size, when and from which commit built")
    imp = sub.add_parser("import", help="a SIF copied here enters the store under its sha256")
    imp.add_argument("sif", type=Path)
    imp.add_argument("--expect-sha256", help="the digest the sender recorded; refused if the file's differs")
    push = sub.add_parser("push", help="push a stored image to an OCI registry (tagged with its digest too)")
    push.add_argument("image", help="a flavor (its current image) or a sha256")
    push.add_argument("reference", help="oras://REGISTRY/REPO[:TAG]")
    pull = sub.add_parser("pull", help="pull an image from an OCI registry into the store, its digest checked")
    pull.add_argument("reference", help="oras://REGISTRY/REPO:TAG or @sha256:MANIFEST")
    pull.add_argument("--expect-sha256", help="the image's digest (a run's manifest records it)")
    for command in (push, pull):
        command.add_argument("--plain-http", action="store_true", help="a registry without TLS (apptainer --no-https)")
    sign = sub.add_parser("sign", help="sign a stored image with your PGP key: the signed copy is a new image")
    sign.add_argument("image", help="a flavor (its current image) or a sha256")
    sign.add_argument("--keyidx", type=int, help="which of your secret keys (apptainer key list --secret)")
    der = sub.add_parser("derive", help="your project's hash-locked packages on top of a stored image, stored as "
                                        "the flavor BASE+NAME with its parent's digest")
    der.add_argument("name", help="the project's name: the image's flavor becomes <base flavor>+NAME")
    der.add_argument("--from", dest="base", required=True, help="the image to build on: a flavor or a sha256")
    der.add_argument("--requirements", type=Path, required=True,
                     help="a hash-locked requirements file (uv pip compile --generate-hashes)")
    der.add_argument("--wheels", type=Path, help="install only from this directory of wheels (no index at build time)")
    der.add_argument("--dry-run", action="store_true", help="print the definition file and build nothing")
    ver = sub.add_parser("verify", help="recompute the digests of the store's files and name any that changed")
    ver.add_argument("digest", nargs="?", help="only this image (sha256)")
    for command in sub.choices.values():
        command.add_argument("--cluster", help="that cluster's image store (its file's images:, your settings)")
    return p


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)
    root = command_store(args.cluster)
    if args.command in WRITES and not getattr(args, "dry_run", False):
        project.check_writable(root, "the image store", STORE_FIX)
    if args.command == "list":
        return list_images(root)
    if args.command == "import":
        entry, new = admit(args.sif, args.expect_sha256, root)
        print(f"{'imported' if new else 'already in the store:'} {describe(entry)}")
    elif args.command == "push":
        return push_image(args.image, args.reference, args.plain_http, root)
    elif args.command == "pull":
        with shown_progress() as shown:
            entry, new = oci.pull_into_store(args.reference, args.plain_http, args.expect_sha256, root, shown)
        print(f"{'pulled' if new else 'already in the store:'} {describe(entry)}")
    elif args.command == "sign":
        entry, new = signing.sign(store.named(args.image, root), root, args.keyidx)
        print(f"{'signed' if new else 'already in the store:'} {describe(entry)} (signed from sha256:"
              f"{entry.signed_from}, by {', '.join(entry.signers) or 'a key this keyring cannot verify'})")
    elif args.command == "derive":
        return derive_image(args, root)
    else:
        return verify(root, args.digest)
    return 0


def derive_image(args, root: Path) -> int:
    entry, done = derive.derive(args.name, args.base, args.requirements, args.wheels, root, args.dry_run)
    if entry is None:
        print(done, end="")
    else:
        print(f"{done} {describe(entry)} (parent sha256:{entry.parent_sha256}); run with --flavor {entry.flavor}")
    return 0


def describe(entry: store.ImageRecord) -> str:
    return f"{entry.flavor} image sha256:{entry.sha256} ({entry.size / 2**20:.0f} MiB) -> {entry.path}"


def list_images(root: Path) -> int:
    found = store.records(root)
    for entry in found:
        where = "" if Path(entry.path).is_file() else "  (gone from the store)"
        pushed = "".join(f"  pushed {p['reference']}" for p in entry.pushed)
        signed = (f"  signed by {','.join(entry.signers)} from sha256:{entry.signed_from[:12]}"
                  if entry.signed_from else "")
        parent = f"  parent sha256:{entry.parent_sha256}" if entry.parent_sha256 else ""
        print(f"{entry.flavor:9s} sha256:{entry.sha256}  {entry.size / 2**20:6.0f} MiB  stored {entry.built_at}  "
              f"commit {entry.git_commit or '-'}{parent}{signed}{pushed}{where}")
    if not found:
        print(f"no images in {root}; build one (make image) or import one (bin/run-cluster images import FILE.sif)")
    return 0


def push_image(image: str, reference: str, plain_http: bool, root: Path) -> int:
    entry = store.named(image, root)
    with shown_progress() as shown:
        refs = oci.push(Path(entry.path), entry.sha256, reference, plain_http, shown)
    store.note_push(entry.sha256, refs[0], plain_http, root)
    print(f"pushed {entry.flavor} image sha256:{entry.sha256} -> {' and '.join(refs)}")
    return 0


def verify(root: Path, digest: Optional[str]) -> int:
    """One line per image; exit 2 naming every store file whose bytes no longer match its digest."""
    wanted = [e for e in store.records(root) if digest in (None, e.sha256)]
    if digest and not wanted:
        raise UserError(f"no image sha256:{digest} in {root}; see bin/run-cluster images list")
    bad = []
    for entry in {e.sha256: e for e in wanted}.values():
        if not Path(entry.path).is_file():
            bad.append(f"{entry.flavor} sha256:{entry.sha256}: its store file {entry.path} is gone")
        elif store.sha256_file(entry.path) != entry.sha256:
            bad.append(f"{entry.flavor} sha256:{entry.sha256}: {entry.path} changed since it was stored")
        else:
            print(f"ok {entry.flavor} sha256:{entry.sha256}")
    raise_all([UserError(line) for line in bad])
    return 0
