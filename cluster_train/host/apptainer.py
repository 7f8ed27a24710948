"""Every call of Apptainer from the login-node side goes through here (the scheduler adapters' counterpart for the
container runtime): one function per verb the host uses, one message for a missing binary, one for a too-old one.

The minimum is Apptainer 1.1.0: the host builds derived images with `build --mksquashfs-args`, binds data images
with `-B SRC:DST:ro,image-src=/`, reads SIF partitions with `apptainer sif` and moves images as `oras://` SIFs (push,
pull --disable-cache). Apptainer 1.0 (Singularity 3.8 renamed) is not known to have all of these, and an old binary
fails far from its cause; the tests run 1.4.5. Refusing it up front says so in one line.

spython (pinned in the images and tests/requirements.txt) is not used here, on purpose: its Client runs
`singularity`, not `apptainer`; it captures output, where `build` and `sign` must stream theirs to the terminal (and
`sign` ask for a passphrase); a failed `Client.build` returns None instead of the error text the user needs in one
line; and the host side must import with only pyyaml and jinja2 on a login node. It serves nothing here: only
tests/host/test_containers.py parses definition files with it.

`instance` is not called on the host side (jobs start their containers in the rendered job scripts, which are
templates, not calls), so it has no function here."""
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from cluster_train.shared.errors import UserError

MINIMUM = (1, 1, 0)
VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def missing() -> str:
    return ("apptainer is not on PATH: cluster-train builds, checks and starts images with it; load it (module load "
            "apptainer) or install it (make apptainer, as root)")


def too_old(said: str) -> str:
    return (f"apptainer is too old ({said.strip()}); cluster-train needs {'.'.join(map(str, MINIMUM))} or newer: "
            f"load a newer module (module avail apptainer) or install one (make apptainer, as root)")


def problem(path: Optional[str] = None) -> str:
    """"" when a usable Apptainer is on `path` (default: this process's PATH); else the one line that says why not."""
    exe = shutil.which("apptainer", path=path)
    if not exe:
        return missing()
    said = version_of(exe, os.stat(exe).st_mtime_ns)
    found = VERSION.search(said)
    if found and tuple(int(part or 0) for part in found.groups()) < MINIMUM:
        return too_old(said)
    return ""  # a version it does not print as digits (a development build) is taken as new enough


@functools.lru_cache(maxsize=None)  # one `apptainer --version` per binary (its mtime: a reinstall asks again)
def version_of(exe: str, mtime_ns: int) -> str:
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return done.stdout.strip() or done.stderr.strip()


def command(*args: str, path: Optional[str] = None) -> List[str]:
    """The command line of `apptainer ARGS`, for callers that run it with their own timeouts (doctor)."""
    said = problem(path)
    if said:
        raise UserError(said)
    return [shutil.which("apptainer", path=path) or "apptainer", *args]


def run(*args: str, capture: bool = True, **options) -> subprocess.CompletedProcess:
    """`apptainer ARGS`, text mode; output captured unless `capture` is False (then it streams to the terminal)."""
    if capture:
        options.setdefault("stdout", subprocess.PIPE)
        options.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(command(*args, path=options.pop("path", None)), text=True, **options)


def run_ticking(*args: str, tick: Callable[[int], None], every_s: float = 1.0,
                **options) -> subprocess.CompletedProcess:
    """`apptainer ARGS` with its output captured, `tick(its pid)` called every `every_s` while it runs (a long push
    or pull whose progress the caller measures: Apptainer shows none for oras://)."""
    with subprocess.Popen(command(*args), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          **options) as proc:
        while True:
            tick(proc.pid)
            try:
                out, err = proc.communicate(timeout=every_s)  # asked again after a timeout, it loses nothing
                return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                continue


def version(path: Optional[str] = None) -> str:
    exe = command(path=path)[0]
    return version_of(exe, os.stat(exe).st_mtime_ns)


def buildcfg(path: Optional[str] = None) -> str:
    """Where this Apptainer was installed and keeps its configuration (KEY=VALUE lines); "" where it is unusable."""
    return run("buildcfg", path=path).stdout if not problem(path) else ""


def build(work: Path, args: List[str], env: dict) -> subprocess.CompletedProcess:
    """Streams its output: a build takes minutes and its log is how a failed %post is read."""
    return run("build", *args, capture=False, cwd=work, env=env)


def exec_(options: List[str], image: str, argv: List[str]) -> subprocess.CompletedProcess:
    return run("exec", *options, image, *argv)


def inspect_labels(sif: Path) -> subprocess.CompletedProcess:
    return run("inspect", "--labels", "--json", str(sif))


def verify(sif: Path) -> subprocess.CompletedProcess:
    return run("verify", "--local", "--json", str(sif))


def sign(sif: Path, keyidx: Optional[int], interactive: bool) -> subprocess.CompletedProcess:
    """Interactive: its output goes to the terminal, where a protected key asks for its passphrase."""
    keys = ["--keyidx", str(keyidx)] if keyidx is not None else []
    return run("sign", *keys, str(sif), stdout=None if interactive else subprocess.PIPE, stderr=subprocess.PIPE)


def push(sif: Path, reference: str, plain_http: bool, tick: Callable[[int], None] = lambda pid: None
         ) -> subprocess.CompletedProcess:
    return run_ticking("push", *no_https(plain_http), str(sif), reference, tick=tick)


def pull(into: Path, reference: str, plain_http: bool, tick: Callable[[int], None] = lambda pid: None,
         env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return run_ticking("pull", "--force", "--disable-cache", *no_https(plain_http), str(into), reference, tick=tick,
                       env=env)


def no_https(plain_http: bool) -> Tuple[str, ...]:
    return ("--no-https",) if plain_http else ()


def sif(verb: str, *args: str, **options) -> subprocess.CompletedProcess:
    """`apptainer sif VERB ARGS` (list, dump): the SIF file's partitions, as data images are shipped in one."""
    return run("sif", verb, *args, **options)
