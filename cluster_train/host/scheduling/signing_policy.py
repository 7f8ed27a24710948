"""Which images a cluster runs: `require_signed` and `signers` as the cluster file and the user's settings give
them, read into one `Policy` (cluster_train/host/images/signing.py checks an image against it)."""
from dataclasses import dataclass
from typing import Any, List, Tuple

from cluster_train.shared.errors import UserError

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


def policy(cluster_required: bool, cluster_signers: List[str], cluster_file: str, user: dict,
           settings_file: str) -> Policy:
    """Signed images are required where the cluster file or the user's settings say so; the allowed keys are those
    both name (a user may add their own key to a lab's list)."""
    required = cluster_required or bool(user.get("require_signed"))
    source = cluster_file if cluster_required else settings_file
    signers = tuple(dict.fromkeys(cluster_signers
                                  + fingerprints(user.get("signers"), f"settings file {settings_file}")))
    return Policy(required, signers, source) if required else Policy()
