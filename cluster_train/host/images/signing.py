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
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import apptainer, undecodable
from cluster_train.host.scheduling.signing_policy import Policy
from cluster_train.host.images import store


def signers_of(sif: Path) -> Tuple[int, List[str]]:
    """(signatures in the file, fingerprints of those the user's keyring verifies); every signature must verify."""
    done = apptainer.verify(sif)
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
    return undecodable.environ("APPTAINER_KEYSDIR") or str(Path.home() / ".apptainer" / "keys")


def sign(source: store.ImageRecord, root: Path, keyidx: Optional[int] = None) -> Tuple[store.ImageRecord, bool]:
    """Sign a copy of a stored image (its bytes checked by the caller) with the user's PGP key and store it as a new
    image whose record names the build it was signed from: (the signed image's record, whether it was new)."""
    tmp = root / store.STORE / f".sign.{source.sha256}.{os.getpid()}.sif"
    shutil.copyfile(source.path, tmp)
    try:
        signed = apptainer.sign(tmp, keyidx, interactive=sys.stdin.isatty())  # a protected key asks its passphrase
        if signed.returncode != 0:
            raise UserError(f"apptainer sign {tmp} failed: {_last_line(signed.stderr)}")
        _, signers = signers_of(tmp)
        facts = {k: getattr(source, k) for k in ("def_sha256", "lock_sha256", "inputs_sha256", "parent_sha256")}
        return store.add(source.flavor, tmp, store.sha256_file(tmp), root, source.git_commit, owned=True,
                         signed_from=source.sha256, signers=signers, **facts)
    finally:
        tmp.unlink(missing_ok=True)


def _last_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()] or ["no output"]
    return lines[-1].removeprefix("FATAL:").strip()
