"""How to reach one cluster over SSH, from the user's settings for it: `ssh:` (user@login.host or a Host of
~/.ssh/config), `remote_dir:` (the project's copy there), and optionally `ssh_port:`, `ssh_jump:` (-J),
`ssh_config:` (-F) and `remote_python:`. None of these is sent to the cluster."""
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Dict, Optional

from cluster_train.shared.errors import UserError

KEYS = ("ssh", "ssh_port", "ssh_jump", "ssh_config", "remote_dir", "remote_python")
# An ssh destination or jump host: no spaces, no leading '-' (ssh would read it as an option, -oProxyCommand=...)
DESTINATION = re.compile(r"^[A-Za-z0-9_.%+@\[\]:-]{1,255}$")
JUMP = re.compile(r"^[A-Za-z0-9_.%+@\[\]:,-]{1,1000}$")


@dataclass(frozen=True)
class Reach:
    cluster: str
    destination: str
    remote_dir: str
    port: Optional[int] = None
    jump: Optional[str] = None
    config: Optional[str] = None
    python: str = "python3"

    @property
    def settings_file(self) -> str:
        """Where the settings sent for this cluster live on it: beside the project's copy (rsync never touches them),
        one file per cluster (two clusters may share a login node and a copy)."""
        copy = PurePosixPath(self.remote_dir)
        return str(copy.parent / f".{copy.name}-{self.cluster}-settings.yaml")


def of(cluster: str, user: Dict[str, Any]) -> Optional[Reach]:
    """The cluster's Reach when your settings give it an `ssh:`, else None (the cluster is this machine's)."""
    if not user.get("ssh"):
        return None
    if not user.get("remote_dir"):
        raise UserError(f"your settings give {cluster} ssh: {user['ssh']} but no remote_dir:; add the directory the "
                        f"project's copy lives in there, e.g. remote_dir: /scratch/you/cluster-train")
    port = user.get("ssh_port")
    return Reach(cluster, str(user["ssh"]), str(user["remote_dir"]), int(port) if port is not None else None,
                 user.get("ssh_jump"), user.get("ssh_config"), str(user.get("remote_python") or "python3"))


def check(key: str, text: str, where: str) -> None:
    """One settings value of KEYS, refused with its fix where ssh would misread it."""
    if key == "ssh" and not DESTINATION.match(text) or key == "ssh_jump" and not JUMP.match(text) \
            or text.startswith("-"):
        raise UserError(f"{where}: {key} {text!r} is not a host ssh can be given; write it like {key}: "
                        f"you@login.cluster.edu (or a Host of your ~/.ssh/config)")
    if key == "ssh_port" and not (text.isdigit() and 0 < int(text) < 65536):
        raise UserError(f"{where}: ssh_port {text!r} is not a TCP port; write a number from 1 to 65535 (or leave it "
                        f"to your ~/.ssh/config)")
    if key == "remote_dir" and not (text.startswith("/") or text.startswith("~")) or "\n" in text:
        raise UserError(f"{where}: remote_dir {text!r} is not an absolute path on the cluster; write it like "
                        f"remote_dir: /scratch/you/cluster-train")
