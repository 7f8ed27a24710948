"""`make lock-derived REQS=requirements.in WHEELS=DIR`: a derived image's lock from a directory of wheels, offline.

With no index to resolve against, the directory is the closure (what `pip download -r requirements.in -d DIR` left
there, or a project's own built wheels): every wheel in it becomes one hash-pinned line, as `uv pip compile
--generate-hashes` writes them, except the packages the image already holds at that version. Nothing else is
guessed: a requirement of REQS with no wheel there, two versions of one package, or a wheel that would replace a
version the image holds is refused with one line. `bin/run-cluster images derive ... --wheels DIR` then installs it
with `pip install --require-hashes --no-deps --no-index` and its `pip check` names any dependency still missing.
Stdlib only: this runs where uv may not be installed and PyPI not reachable.
"""
import argparse
import hashlib
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from cluster_train.shared.errors import UserError

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normal(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): Foo_Bar, foo.bar and foo-bar are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_pin(wheel: Path) -> Tuple[str, str]:
    """(name, version) from a wheel's file name: NAME-VERSION(-BUILD)?-PY-ABI-PLATFORM.whl (PEP 427)."""
    parts = wheel.name[:-len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise UserError(f"{wheel} is not named as a wheel is (NAME-VERSION-PY-ABI-PLATFORM.whl); rebuild or "
                        f"download it with pip, which names it so")
    return normal(parts[0]), parts[1]


def held(locks: Sequence[Path]) -> Dict[str, str]:
    """name -> version of every `name==version` line of the image's lock (and its Debian constraints, cpu)."""
    found = {}
    for lock in locks:
        for line in lock.read_text().splitlines():
            pin = PIN.match(line)
            if pin:
                found[normal(pin.group(1))] = pin.group(2)  # torch==1.13.1+cu116 as it is
    return found


def requirement_names(reqs: Path) -> List[str]:
    """The package names REQS asks for (its options and comments skipped)."""
    names = []
    for line in reqs.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        match = REQ_NAME.match(line) if line and not line.startswith("-") else None
        if match:
            names.append(normal(match.group(1)))
    return names


def wheels_of(directory: Path) -> Dict[Tuple[str, str], List[Path]]:
    if not directory.is_dir() or not any(directory.glob("*.whl")):
        raise UserError(f"WHEELS={directory} is not a directory of .whl files; fill it with pip download -r "
                        f"requirements.in -d {directory} on a machine that reaches PyPI")
    found: Dict[Tuple[str, str], List[Path]] = {}
    for wheel in sorted(directory.glob("*.whl")):
        found.setdefault(wheel_pin(wheel), []).append(wheel)
    return found


def lock_lines(directory: Path, image: Dict[str, str], reqs: Optional[Path], flavor: str) -> List[str]:
    """The lock's requirement lines: each wheel the image lacks, name==version with every file's sha256."""
    found = wheels_of(directory)
    versions: Dict[str, List[str]] = {}
    for name, version in found:
        versions.setdefault(name, []).append(version)
    for name, listed in versions.items():
        if len(listed) > 1:
            raise UserError(f"WHEELS={directory} holds {name} {' and '.join(listed)}; keep one version of each "
                            f"package there")
        if name in image and image[name] != listed[0]:
            raise UserError(f"WHEELS={directory} holds {name} {listed[0]} but the {flavor} image holds {name}=="
                            f"{image[name]}, which --no-deps would replace; remove that wheel, or download "
                            f"{name}=={image[name]} instead")
    for name in requirement_names(reqs) if reqs else []:
        if name not in versions and name not in image:
            raise UserError(f"REQS={reqs} asks for {name}, which has no wheel in {directory} and is not in the "
                            f"{flavor} image; add it: pip download -r {reqs} -d {directory}")
    lines = []
    for (name, version), files in sorted(found.items()):
        if image.get(name) == version:
            continue  # the image has it already: installing it again would only replace it with the same files
        hashes = sorted(f"--hash=sha256:{hashlib.sha256(w.read_bytes()).hexdigest()}" for w in files)
        lines.append(" \\\n    ".join([f"{name}=={version}", *hashes]))
    if not lines:
        raise UserError(f"every wheel in {directory} is one the {flavor} image already holds; nothing to derive")
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m cluster_train.host.images.wheel_lock",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--flavor", required=True)
    parser.add_argument("--held", type=Path, action="append", default=[],
                        help="a lock (or constraints file) of what the image already holds; repeatable")
    parser.add_argument("--reqs", type=Path, default=None, help="requirements.in: each name must be covered")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        lines = lock_lines(args.wheels, held(args.held), args.reqs, args.flavor)
    except UserError as err:
        print(f"make lock-derived: {err}", file=sys.stderr)
        return 2
    header = (f"# {args.output.name}: generated by `make lock-derived WHEELS={args.wheels}` from the wheels there "
              f"(no index), less what the {args.flavor} image holds.\n"
              f"# Build it with: bin/run-cluster images derive NAME --from {args.flavor} --requirements "
              f"{args.output} --wheels {args.wheels}\n")
    args.output.write_text(header + "\n".join(lines) + "\n")
    print(f"make lock-derived: {args.output}: {len(lines)} packages from {args.wheels} on top of the "
          f"{args.flavor} image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
