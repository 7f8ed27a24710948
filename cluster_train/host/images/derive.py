"""`run-cluster images derive NAME --from BASE --requirements FILE.lock [--wheels DIR]`: a project's own packages
on top of a cluster-train image.

The base is a stored image (a flavor's current one, or a sha256), its store file hashed first: the bytes built on
are the bytes its name promises. The derived image is its root file system plus one layer, `pip install
--require-hashes --no-deps -r FILE.lock` into the base's venv (as containers/install.sh installs the base's own
lock), from the definition containers/derived.def.j2 renders with `Bootstrap: localimage` and `From:
<images>/store/<sha256>.sif`. It enters the store like any image, under the flavor `<base flavor>+NAME` (so
`--flavor cpu+NAME` picks it, and the base flavor decides the GPU and driver checks), recorded with its parent's
digest (`parent_sha256`) and the lock's (`lock_sha256`), which its labels carry too, so a copy imported elsewhere
knows both. The same parent, lock and wheels build nothing a second time.
"""
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import apptainer
from cluster_train.host.images import store
from cluster_train.host.project import ROOT

TEMPLATE = ROOT / "containers" / "derived.def.j2"
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")
# What a definition file's From: and %files lines carry unquoted (Apptainer has no quoting there).
SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
# localimage unpacks the parent and squashes the whole root file system again (the derived SIF is a full image):
# at gzip's default level 9 that took 9 min for the 2.1 GB CPU image here (2 busy cores), at level 1 about one,
# for 12 % more bytes. Still gzip, so every kernel and squashfuse that mounts the base mounts the derived image too.
FAST_SQUASHFS = "-Xcompression-level 1"
INSIDE = "/opt/cluster-train/derived"  # where the lock (and, during the build, the wheels) sit in the image
FIX_HASHES = ("generate it with hashes: make lock-derived REQS=requirements.in, or uv pip compile --generate-hashes "
              "requirements.in -o {lock} (or pip-compile --generate-hashes)")
HASH = re.compile(r"--hash[= ](sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})$")
PINNED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?\s*===?\s*[^\s;=<>!~,]+\s*(;.*)?")
# what the build asks for anyway, and PyPI named as the index (as lock tools write it): the packages come from PyPI
# by hash, or from --wheels; any other index is refused (a lock is hash-pinned requirements, not where to look)
ALLOWED_OPTIONS = ("--require-hashes",)
INDEX_OPTIONS = ("--index-url", "-i")
PYPI = re.compile(r"https://pypi\.org/simple/?")


# ---------------------------------------------------------------------------------------------------------------
# What is checked before anything is built


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise UserError(f"derived image name {name!r} must be 1-40 of a-z, 0-9, '_.-', starting with a letter or "
                        f"digit (it becomes the flavor <base>+{name}); e.g. images derive myproject --from cpu ...")
    return name


def check_lock(lock: Path) -> List[str]:
    """The lock's requirements, each pinned to one version (==) with a hash; refused at the first line that is not."""
    if not lock.is_file():
        raise UserError(f"requirements file {lock} does not exist; give the hash-locked file, e.g. requirements.lock")
    found = []
    for number, line in logical_lines(lock.read_text()):
        problem = line_problem(line)
        if problem:
            raise UserError(f"{lock} line {number}: {line[:80]!r} {problem}; " + FIX_HASHES.format(lock=lock))
        if not line.startswith("-"):
            found.append(line.split()[0])
    if not found:
        raise UserError(f"{lock} lists no packages; put the project's packages in requirements.in and "
                        + FIX_HASHES.format(lock=lock))
    return found


def logical_lines(text: str) -> List[Tuple[int, str]]:
    """(first line number, text) of each requirement as pip reads it: `\\` continues a line, ` #` starts a comment."""
    joined, start, parts = [], 0, []
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw)
        start = start or number
        parts.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            requirement = " ".join(" ".join(parts).split())
            if requirement:
                joined.append((start, requirement))
            start, parts = 0, []
    return joined


def line_problem(line: str) -> str:
    """"" for a hash-pinned requirement, --require-hashes or PyPI named as the index; else what is wrong."""
    if line.startswith("-"):
        option, value = (re.split(r"[=\s]+", line, 1) + [""])[:2]
        if option in ALLOWED_OPTIONS or (option in INDEX_OPTIONS and PYPI.fullmatch(value)):
            return ""
        other = " with an index other than PyPI" if option in INDEX_OPTIONS + ("--extra-index-url",) else ""
        return f"uses {option}{other}, which a derived image's lock cannot: only requirements pinned by --hash " \
               f"(from PyPI, or your --wheels DIR)"
    requirement, _, options = line.partition(" --")
    options = [f"--{o}" for o in options.split(" --")] if options else []
    if not PINNED.fullmatch(requirement.strip()):
        return "is not pinned to one version (name==version)"
    if not options or not all(HASH.fullmatch(o.strip()) for o in options):
        return "has no --hash=sha256:... for every file it may install"
    return ""


def check_wheels(wheels: Optional[Path]) -> None:
    if wheels is not None and not (wheels.is_dir() and any(wheels.glob("*.whl"))):
        raise UserError(f"--wheels {wheels} is not a directory of .whl files; fill it with pip download -r "
                        f"requirements.lock -d {wheels} (or drop --wheels to install from PyPI at build time)")


def parent_image(base: str, root: Path) -> store.ImageRecord:
    """The image to build on, by flavor or sha256, its store file hashed: its sha256 must equal the name."""
    digest = base.removeprefix("sha256:")
    entry = store.current(base, root) or store.find(digest, root)
    if entry is None and re.fullmatch(r"[0-9a-f]{64}", digest):
        raise UserError(f"no image sha256:{digest} in the image store {root} to derive from; import it first "
                        f"(bin/run-cluster images import FILE.sif --expect-sha256 {digest}) or see images list")
    if entry is None:
        raise UserError(f"no {base} image in the image store {root} to derive from; build it (make image "
                        f"FLAVOR={store.base_flavor(base)}) or give a sha256 of bin/run-cluster images list")
    entry = store.verified(entry.sha256, root, f"the {entry.flavor} image to derive from")
    if not SAFE_PATH.fullmatch(entry.path):
        raise UserError(f"the store path {entry.path} has characters a definition file's From: line cannot carry; "
                        f"use an image store whose path has only letters, digits and '_./+-' (CT_IMAGES)")
    return entry


# ---------------------------------------------------------------------------------------------------------------
# The definition and the build


def render(name: str, parent: store.ImageRecord, lock: Path, wheels: bool) -> str:
    try:
        import jinja2
    except ImportError:
        raise UserError("jinja2 is not installed; install the host requirements: "
                        "python3 -m pip install --user pyyaml jinja2") from None
    template = jinja2.Template(TEMPLATE.read_text(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    shown_lock = re.sub(r"[^A-Za-z0-9_.+-]", "_", lock.name)  # only named in a comment line: nothing can break out
    return template.render(flavor=derived_flavor(parent, name), parent_flavor=parent.flavor, parent_path=parent.path,
                           parent_sha256=parent.sha256, lock_name=shown_lock, lock_sha256=store.sha256_file(lock),
                           here=f"{INSIDE}/{name}", wheels=wheels)


def derived_flavor(parent: store.ImageRecord, name: str) -> str:
    return f"{store.base_flavor(parent.flavor)}{store.DERIVED}{name}"


def build_key(definition: str, lock: Path, wheels: Optional[Path]) -> str:
    """The content key of a derived build: its definition (which names the parent by digest), the lock, the wheels."""
    lines = [f"{store.sha256_text(definition)}  derived.def", f"{store.sha256_file(lock)}  requirements.lock"]
    if wheels is not None:
        lines += [f"{store.sha256_file(w)}  wheels/{w.name}" for w in sorted(wheels.iterdir()) if w.is_file()]
    return store.sha256_text("\n".join(lines) + "\n")


def derive(name: str, base: str, lock: Path, wheels: Optional[Path], root: Path,
           dry_run: bool = False) -> Tuple[Optional[store.ImageRecord], str]:
    """Build and record a derived image: (its record, what happened); every check runs before anything is built."""
    check_name(name)
    check_lock(lock)
    check_wheels(wheels)
    parent = parent_image(base, root)
    definition = render(name, parent, lock, wheels is not None)
    if dry_run:
        return None, definition
    flavor, key = derived_flavor(parent, name), build_key(definition, lock, wheels)
    built = next((e for e in reversed(store.records(root)) if e.flavor == flavor and e.inputs_sha256 == key
                  and Path(e.path).is_file()), None)
    if built is not None:
        return built, "up to date:"
    sif = build(definition, lock, wheels, root)
    try:  # the image's code is its parent's, so is the commit it was built from
        entry, _ = store.add(flavor, sif, store.sha256_file(sif), root, parent.git_commit, owned=True,
                             def_sha256=store.sha256_text(definition), lock_sha256=store.sha256_file(lock),
                             inputs_sha256=key, parent_sha256=parent.sha256)
    finally:
        sif.unlink(missing_ok=True)
    keep_beside_store(entry, definition, root)
    return entry, "built"


def build(definition: str, lock: Path, wheels: Optional[Path], root: Path) -> Path:
    """apptainer build in a directory of its own beside the store (so the result is renamed, not copied, into it);
    the definition's %files name the lock and wheels by the fixed names they get there."""
    (root / store.STORE).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".derive.", dir=root / store.STORE))
    try:
        (work / "derived.def").write_text(definition)
        shutil.copyfile(lock, work / "requirements.lock")
        if wheels is not None:
            shutil.copytree(wheels, work / "wheels")
        run_build(work)
        sif = root / store.STORE / f"{work.name}.sif"
        os.replace(work / "image.sif", sif)
        return sif
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_build(work: Path) -> None:
    args = ["--force", f"--mksquashfs-args={FAST_SQUASHFS}", *cert_binds(), "image.sif", "derived.def"]
    env = dict(os.environ)
    if os.geteuid() == 0:  # as `make image` does: root in this kind of container may not raise its resource limits
        env["APPTAINER_DROP_CAPS"] = "CAP_SYS_RESOURCE"
    print(f"images derive: apptainer build {' '.join(args)} (in {work})", flush=True)
    done = apptainer.build(work, args, env)
    if done.returncode != 0:
        raise UserError(f"apptainer build of the derived image failed (exit {done.returncode}, its output above); "
                        f"nothing was stored")


def cert_binds() -> List[str]:
    """The host's CA directory, read-only, for pip behind a TLS-intercepting proxy (as containers/images.mk)."""
    if not Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        return []
    return ["--mount", "type=bind,source=/etc/ssl/certs,destination=/mnt/host-certs,ro"]


def keep_beside_store(entry: store.ImageRecord, definition: str, root: Path) -> None:
    """<images>/<flavor>.sif (a hard link to the store file, as make image leaves images/cpu.sif) and the definition
    it was built from, <images>/<flavor>.def."""
    link = root / f"{entry.flavor}.sif"
    tmp = root / f".{entry.flavor}.sif.{os.getpid()}.tmp"
    try:
        os.link(entry.path, tmp)
        os.replace(tmp, link)
    except OSError:  # a file system without hard links: the store path is the image's name anyway
        tmp.unlink(missing_ok=True)
    (root / f"{entry.flavor}.def").write_text(definition)
