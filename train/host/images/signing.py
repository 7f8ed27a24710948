"""Signed images: `images sign` with the user's PGP key (Apptainer's own signing), and `require_signed`.

Signing adds signature objects to a SIF, so the signed file has another sha256 than the build it was signed from.
A run's identity is always the digest of the bytes it runs: `images sign` copies the stored build, signs the copy
and stores it as a new image whose record names the build it came from (`signed_from`) and its signers; the
unsigned build is never rewritten. A rerun asks for the signed digest and gets exactly those bytes.

`require_signed: true` (the cluster file or the user's settings; `signers:` optionally lists the allowed key
fingerprints) makes preflight refuse an unsigned or foreign-signed image, and the job check the signature again
before `apptainer exec` (a key removed from the keyring since submission). Both verify offline (`--local`) against
the user's keyring: $APPTAINER_KEYSDIR, else ~/.apptainer/keys.
"""
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

from train.errors import UserError
from train.host.images import store as images

FINGERPRINT_DIGITS = 40  # a PGP v4 fingerprint: 40 hex digits, as `apptainer key list` prints them


@dataclass(frozen=True)
class Policy:
    required: bool = False
    signers: Tuple[str, ...] = ()  # allowed fingerprints, lower case; empty: any key of the user's keyring
    source: str = ""  # the file that asked for signed images, for messages


def fingerprints(value: Any, where: str) -> List[str]:
    """`signers:` as lower-case fingerprints; spaces inside one (as some tools print them) are allowed."""
    items = value if isinstance(value, list) else [] if value is None else [value]
    found = []
    for item in items:
        text = str(item).replace(" ", "").lower()
        if len(text) != FINGERPRINT_DIGITS or any(c not in "0123456789abcdef" for c in text):
            raise UserError(f"{where}: signers item {str(item)[:60]!r} is not a key fingerprint of 40 hex digits; "
                            f"copy it from apptainer key list")
        found.append(text)
    return found


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where}: require_signed must be true or false, not {value!r}")
    return value


def policy(cluster_required: bool, cluster_signers: List[str], cluster_file: str, user: dict, settings_file: str) -> Policy:
    """Signed images are required where the cluster file or the user's settings say so; the allowed keys are those
    both name (a user may add their own key to a lab's list)."""
    required = cluster_required or bool(user.get("require_signed"))
    source = cluster_file if cluster_required else settings_file
    signers = tuple(dict.fromkeys(cluster_signers + fingerprints(user.get("signers"), f"settings file {settings_file}")))
    return Policy(required, signers, source) if required else Policy()


def signers_of(sif: Path) -> Tuple[int, List[str]]:
    """(signatures in the file, fingerprints of those the user's keyring verifies); every signature must verify."""
    done = _apptainer("verify", "--local", "--json", str(sif))
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise UserError(f"apptainer verify cannot read {sif}: {_last_line(done.stderr)}") from None
    found = [key["Signer"]["Fingerprint"].lower() for key in report.get("SignerKeys") or []]
    return report.get("Signatures", 0), (sorted(set(found)) if done.returncode == 0 else [])


def problem(path: str, sha256: str, flavor: str, rule: Policy) -> str:
    """"" when the image is signed as the policy asks; else the one line that says why not and what to do."""
    count, signers = signers_of(Path(path))
    image = f"the {flavor} image sha256:{sha256[:12]}"
    if count == 0:
        return (f"{image} is not signed and {rule.source} requires signed images (require_signed); sign it: "
                f"bin/run-cluster images sign sha256:{sha256} (the signed copy is a new image)")
    if not signers:
        return (f"{image} is signed by a key your keyring ({keyring()}) does not hold or cannot verify; import the "
                f"signer's public key (apptainer key import KEY.asc) if you trust it")
    foreign = [fpr for fpr in signers if rule.signers and fpr not in rule.signers]
    if foreign:
        return (f"{image} is signed by {', '.join(foreign)}, not by a key {rule.source} allows (signers: "
                f"{', '.join(rule.signers)}); use an image signed by one of them")
    return ""


def keyring() -> str:
    return os.environ.get("APPTAINER_KEYSDIR") or str(Path.home() / ".apptainer" / "keys")


def sign(source: images.ImageRecord, root: Path, keyidx: Optional[int] = None) -> Tuple[images.ImageRecord, bool]:
    """Sign a copy of a stored image (its bytes checked by the caller) with the user's PGP key and store it as a new
    image whose record names the build it was signed from: (the signed image's record, whether it was new)."""
    tmp = root / images.STORE / f".sign.{source.sha256}.{os.getpid()}.sif"
    shutil.copyfile(source.path, tmp)
    try:
        _apptainer("sign", *(["--keyidx", str(keyidx)] if keyidx is not None else []), str(tmp),
                   interactive=sys.stdin.isatty(), check=True)  # a protected key asks for its passphrase
        _, signers = signers_of(tmp)
        facts = {k: getattr(source, k) for k in ("def_sha256", "lock_sha256", "inputs_sha256", "parent_sha256")}
        return images.add(source.flavor, tmp, images.sha256_file(tmp), root, source.git_commit, owned=True,
                          signed_from=source.sha256, signers=signers, **facts)
    finally:
        tmp.unlink(missing_ok=True)


def _apptainer(command: str, *args: str, interactive: bool = False, check: bool = False) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(["apptainer", command, *args], text=True,
                              stdout=None if interactive else subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise UserError(f"apptainer is not on PATH: it {command}s images; load it (module load apptainer)") from None
    if check and done.returncode != 0:
        raise UserError(f"apptainer {command} {args[-1]} failed: {_last_line(done.stderr)}")
    return done


def _last_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()] or ["no output"]
    return lines[-1].removeprefix("FATAL:").strip()
