"""The content key of an image build: what `make image` rebuilds on, and what comparing it with the checkout says.

The key is the sha256 of every input that goes into an image: the definition file, the lock file,
containers/install.sh, pyproject.toml and every file of the cluster_train package (tracked or untracked-but-not-ignored)
that runs inside the image (not `cluster_train/host/`, which holds the job templates too), kept as one `sha256  path`
line per input in `images/<flavor>.inputs`. `make image` rebuilds exactly when that key differs from the recorded one.
It runs this module while it reads the Makefile (containers/images.mk: `python3 -m cluster_train.host.images.content_key
inputs ...`; `record ...` after a build), so it stays stdlib only and fast (~0.1 s), Python 3.9+, no torch.

Compared with the checkout, the key says whether the image a new run would use holds this checkout's code
(`stale_inputs`): a job runs the code inside its image, not the checkout's, so an image built before the train
package or the definition files changed would train with the old code while the manifest says only `dirty: true`.
The same key, kept in git as containers/<flavor>.tested, says whether CI must build an image it cannot run (CUDA).
"""
import argparse
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from cluster_train.host.images import store

# Files, besides the definition and lock file, whose content goes into every image.
SHARED_INPUTS = ("containers/install.sh", "pyproject.toml")
PACKAGE_DIRS = ("cluster_train", "train")  # the package, and the shim of python -m
# Parts of the package that never run inside an image (the login-node side, its job templates included in
# cluster_train/host/schedulers/templates/): editing them does not rebuild the images.
HOST_ONLY = ("cluster_train/host/",)


def input_files(def_file, lock_file, repo=Path(".")) -> List[str]:
    """The files whose content goes into an image, relative to the repository root, sorted."""
    repo = Path(repo)
    files = {str(def_file), str(lock_file), *SHARED_INPUTS}
    try:
        done = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *PACKAGE_DIRS],
            cwd=repo, capture_output=True, check=True,
        )
        package = [p for p in done.stdout.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file but bytecode
        package = [
            str(p.relative_to(repo)) for d in PACKAGE_DIRS for p in (repo / d).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    # a tracked file deleted from the work tree is not an input any more
    files.update(p for p in package if (repo / p).is_file() and "__pycache__" not in Path(p).parts
                 and not p.startswith(HOST_ONLY))
    return sorted(files)


def inputs_text(def_file, lock_file, repo=Path(".")) -> str:
    """What `images/<flavor>.inputs` holds: one `sha256  path` line per input, as `sha256sum` prints them."""
    repo = Path(repo)
    lines = [f"{store.sha256_file(repo / p)}  {p}" for p in input_files(def_file, lock_file, repo)]
    return "\n".join(lines) + "\n"


def inputs_status(stamp, def_file, lock_file, repo=Path("."), flavor: Optional[str] = None,
                  root: Optional[Path] = None) -> Tuple[str, str]:
    """("fresh" | "stale", inputs text): fresh when the stamp holds exactly the current inputs and, given a flavor
    and store, the store still holds an image built from them (else bin/run-cluster would find none, and `make
    image` would answer that there is nothing to do)."""
    text = inputs_text(def_file, lock_file, repo)
    stamp = Path(stamp)
    old = stamp.read_text() if stamp.is_file() else None
    key = store.sha256_text(text)
    stored = flavor is None or any(e.flavor == flavor and e.inputs_sha256 == key and Path(e.path).is_file()
                                   for e in store.records(root))
    return ("fresh" if old == text and stored else "stale"), text


def write_stamp(stamp, text: str) -> bool:
    """Write the stamp only when its content changes (its mtime then means "the inputs changed")."""
    stamp = Path(stamp)
    if stamp.is_file() and stamp.read_text() == text:
        return False
    stamp.parent.mkdir(parents=True, exist_ok=True)
    store.atomic_write(stamp, text)
    return True


# ---------------------------------------------------------------------------------------------------------------
# Compared with the checkout: stale images, untested CUDA builds


def stale_inputs(record: store.ImageRecord, repo: Path) -> Optional[str]:
    """None when the image was built from the checkout's current inputs (or its inputs are unknown: imported,
    pulled); else what differs, named by file where the build's stamp still lists them."""
    if record.parent_sha256:  # a derived image runs the code of the image it was built on
        parent = store.find(record.parent_sha256, Path(record.path).parents[1])
        return stale_inputs(parent, repo) if parent else None
    def_file, lock_file = f"containers/{record.flavor}.def", f"containers/{record.flavor}.lock"
    if not record.inputs_sha256 or not (repo / def_file).is_file():
        return None
    text = inputs_text(def_file, lock_file, repo)
    if store.sha256_text(text) == record.inputs_sha256:
        return None
    stamp = Path(record.path).parents[1] / f"{record.flavor}.inputs"  # <store>/<flavor>.inputs, written by make image
    if stamp.is_file() and store.sha256_text(stamp.read_text()) == record.inputs_sha256:
        changed = _changed(stamp.read_text(), text)
        if changed:
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            return ", ".join(changed[:3]) + more
    return "its definition, lock file or cluster_train package"


def _changed(built: str, now: str) -> List[str]:
    """Paths whose sha256 differs between two `sha256  path` listings, or that only one of them has."""
    def table(text: str) -> dict:
        return {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in text.splitlines() if "  " in line}
    old, new = table(built), table(now)
    return sorted(path for path in old.keys() | new.keys() if old.get(path) != new.get(path))


def tested_key(flavor: str, repo=Path(".")) -> Path:
    """containers/<flavor>.tested, kept in git: the content key of the last build of FLAVOR whose %test passed
    (`make image` writes it), so that CI builds an image it cannot run (CUDA) only when that image's inputs changed."""
    return Path(repo) / "containers" / f"{flavor}.tested"


def untested_inputs(flavor: str, repo=Path(".")) -> List[str]:
    """The inputs whose content differs from that tested build (every input when none was kept); [] when none."""
    key = tested_key(flavor, repo)
    now = inputs_text(f"containers/{flavor}.def", f"containers/{flavor}.lock", repo)
    return _changed(key.read_text() if key.is_file() else "", now)


# ---------------------------------------------------------------------------------------------------------------
# `python3 -m cluster_train.host.images.content_key inputs|record|list` (containers/images.mk)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m cluster_train.host.images.content_key",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    rec = sub.add_parser("record", help="hash a built SIF into the store and append it to the index")
    rec.add_argument("--flavor", required=True)
    rec.add_argument("--sif", type=Path, required=True)
    rec.add_argument("--def", dest="def_file", type=Path, required=True)
    rec.add_argument("--lock", type=Path, required=True)
    rec.add_argument("--root", type=Path, default=Path("images"))
    rec.add_argument("--git-commit", default=None, help="default: git rev-parse HEAD")
    rec.add_argument("--inputs", type=Path, default=None,
                     help="the content key taken just before the build (`inputs --snapshot`); default: computed now")
    rec.add_argument("--stamp", type=Path, default=None,
                     help="also write the build's content key here (only if it changed): images/FLAVOR.inputs")

    inp = sub.add_parser("inputs", help="print 'fresh' if STAMP holds the current content key, else 'stale'")
    inp.add_argument("--def", dest="def_file", type=Path, required=True)
    inp.add_argument("--lock", type=Path, required=True)
    inp.add_argument("--stamp", type=Path, required=True)
    inp.add_argument("--write", action="store_true", help="rewrite STAMP (only if it changed) instead")
    inp.add_argument("--flavor",
                     help="fresh only if the store (--root) holds an image of FLAVOR built from these inputs")
    inp.add_argument("--snapshot", type=Path, default=None,
                     help="instead write the current content key to this file (taken before a build, so an edit "
                          "made while it runs is not credited to the image)")

    sub.add_parser("list", help="print the index")
    for p in (inp, sub.choices["list"]):
        p.add_argument("--root", type=Path, default=Path("images"))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "record":
        text = args.inputs.read_text() if args.inputs else inputs_text(args.def_file, args.lock)
        entry = store.record(args.flavor, args.sif, args.def_file, args.lock, args.root,
                             inputs_sha256=store.sha256_text(text), git_commit=args.git_commit)
        if args.stamp is not None:
            write_stamp(args.stamp, text)
        print(f"recorded {entry.flavor} image sha256:{entry.sha256} ({entry.size / 2**20:.0f} MiB) -> {entry.path}")
    elif args.command == "inputs":
        status, text = inputs_status(args.stamp, args.def_file, args.lock, flavor=args.flavor, root=args.root)
        if args.snapshot:
            args.snapshot.write_text(text)
        elif args.write:
            write_stamp(args.stamp, text)
        else:
            print(status)
    elif args.command == "list":
        for entry in store.records(args.root):
            alive = "" if Path(entry.path).is_file() else "  (gone)"
            print(f"{entry.built_at}  {entry.flavor:9s} sha256:{entry.sha256}  {entry.git_commit or '-'}{alive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
