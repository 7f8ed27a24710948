"""What a job needs, sent to the cluster by content before anything runs there: the project's files (those a code
snapshot holds: tracked, and untracked that git does not ignore) through rsync over the shared connection, which
compares checksums and sends only what differs; the user's settings for that cluster, less how to reach it; and the
image and data image a job needs, by digest, where the cluster's stores lack them."""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from cluster_train.shared.errors import UserError
from cluster_train.host import git, project
from cluster_train.host import reach as reach_keys
from cluster_train.host.data import store as data_store
from cluster_train.host.images import oci, store
from cluster_train.host.jobs.code_snapshot import project_files
from cluster_train.host.progress import Meter, Report, ignore, pieces, rsync_done
from cluster_train.host.reach import Reach
from cluster_train.host.remote import ssh


def send_code(reach: Reach) -> Tuple[int, int]:
    """The checkout's files into remote_dir (created if missing), with the commit they came from (the copy has no
    .git: cluster_train/host/git.py reads it there); how many files rsync sent, and how many bytes (its file list alone
    when nothing changed)."""
    ssh.run(reach, ["mkdir", "-p", reach.remote_dir], capture=True)
    names = "\n".join(project_files(project.ROOT)) + "\n"
    argv = ["rsync", "--recursive", "--links", "--perms", "--times", "--checksum", "--stats", "--protect-args",
            "--files-from=-", "-e", shlex.join(ssh.ssh_argv(reach)), f"{project.ROOT}/",
            f"{reach.destination}:{reach.remote_dir}/"]
    done = subprocess.run(argv, input=names, text=True, capture_output=True)
    if done.returncode != 0:
        if "rsync: command not found" in done.stderr or "rsync: not found" in done.stderr:
            raise UserError(f"{ssh.where(reach)} has no rsync; ask the site for it or "
                            f"load its module in your shell's startup file")
        raise UserError(ssh.failure_line(reach, done.stderr))
    commit, dirty = git.git_state(project.ROOT)
    ssh.run(reach, ["sh", "-c", 'cat > "$1"', "sh", f"{reach.remote_dir}/{git.SENT_FROM}"], capture=True,
            input=json.dumps({"commit": commit, "dirty": dirty}) + "\n")
    return _stat(done.stdout, "Number of regular files transferred"), _stat(done.stdout, "Total bytes sent")


def _stat(stats: str, name: str) -> int:
    found = re.search(rf"{name}: ([\d,.]+)", stats)
    return int(re.sub(r"[,.]", "", found.group(1))) if found else 0


def send_settings(reach: Reach, user: Dict[str, Any], batch: bool = False) -> str:
    """Your settings for this cluster, without the keys that reach it, where the launcher there reads them."""
    sent = {k: v for k, v in user.items() if k not in reach_keys.KEYS}
    ssh.run(reach, ["sh", "-c", 'umask 077 && mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", reach.settings_file],
            capture=True, input=yaml.safe_dump(sent, sort_keys=True), batch=batch)
    return reach.settings_file


def send_image(reach: Reach, image: Optional[store.ImageRecord], report: Report = ignore) -> int:
    """The image the job needs, by digest: nothing when the cluster's store holds it; else pulled there from a
    registry it was pushed to (`images push`: the cluster's own network, checked by digest there); else the SIF
    copied with rsync (an interrupted copy resumes from what arrived) and entered into that store by `images import`,
    which checks its sha256 against this one. The bytes sent from here. With no image here, the cluster's own store
    decides (its launcher says what is missing, as on the login node)."""
    if image is None:
        return 0
    listed = launcher_line(reach, ["images", "list", "--cluster", reach.cluster])
    if f"sha256:{image.sha256}" in listed or pulled_there(reach, image):
        return 0
    return sent_and_imported(reach, image.path, f"{image.sha256}.sif",
                             ["images", "import", "{}", "--expect-sha256", image.sha256], report)


def send_data(reach: Reach, entry: Optional[data_store.DataRecord], report: Report = ignore) -> int:
    """The data image the run names (data.image), as the image is sent: nothing when the cluster's data store holds
    it under that name; else copied with rsync and entered there by `data import`, which checks its sha256 against
    this one. The bytes sent. With none here under that name, the cluster's own store decides."""
    if entry is None:
        return 0
    listed = launcher_line(reach, ["data", "list", "--cluster", reach.cluster])
    if any(line.split()[:2] == [entry.name, f"sha256:{entry.sha256}"] for line in listed.splitlines()):
        return 0
    damaged = data_store.fault(entry)  # the copy here is the source: the cluster's digest check would say "copy again"
    if damaged:
        raise UserError(f"the data image {entry.name} here ({entry.path}) {damaged}; restore it, or pack the data "
                        f"again (bin/run-cluster data pack DIR --name {entry.name}); nothing was queued")
    return sent_and_imported(reach, entry.path, f"{entry.sha256}{data_store.SUFFIX}",
                             ["data", "import", "{}", "--name", entry.name, "--expect-sha256", entry.sha256], report)


def sent_and_imported(reach: Reach, path: str, name: str, importer: List[str], report: Report = ignore) -> int:
    """A file copied with rsync into remote_dir/.incoming (an interrupted copy resumes from what arrived), then
    entered into the cluster's store by `importer` ({} is the copy there, which is removed after): bytes sent."""
    incoming = f"{reach.remote_dir}/.incoming/{name}"
    sent = transfer(reach, path, incoming, report)
    launcher_line(reach, [incoming if word == "{}" else word for word in importer] + ["--cluster", reach.cluster])
    ssh.run(reach, ["rm", "-f", incoming], capture=True)
    return sent


def transfer(reach: Reach, path: str, remote: str, report: Report = ignore) -> int:
    """One file copied with rsync to `remote` (its directory created), resuming from what an interrupted copy left
    there; its progress reported as rsync says it (bytes, rate, time left; "resuming from N MB"). Bytes sent."""
    there = ssh.run(reach, ["sh", "-c", 'mkdir -p "$(dirname "$1")" && { stat -c %s "$1" 2>/dev/null || echo 0; }',
                            "sh", remote], capture=True)
    words = there.stdout.split()
    arrived = int(words[-1]) if words and words[-1].isdigit() else 0
    meter = Meter(f"sending {Path(path).name} to {reach.cluster}", os.path.getsize(path), resumed_from=arrived)
    argv = ["rsync", "--partial", "--inplace", "--stats", "--info=progress2", "--protect-args", "-e",
            shlex.join(ssh.ssh_argv(reach)), path, f"{reach.destination}:{remote}"]
    report(meter.at())
    with tempfile.TemporaryFile("w+") as errors:
        rsync = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors)
        said = []
        for piece in pieces(iter(lambda: os.read(rsync.stdout.fileno(), 65536), b"")):
            done = rsync_done(piece)
            if done is None:
                said.append(piece)
            elif done > meter.last.done:  # rsync restarts its count when it checks what arrived
                report(meter.at(done))
        rsync.wait()
        errors.seek(0)
        if rsync.returncode != 0:
            raise UserError(f"{ssh.failure_line(reach, errors.read())} (nothing was queued; a retry sends only the "
                            f"rest)")
    report(meter.at(meter.last.total, final=True))
    return _stat("\n".join(said), "Total bytes sent")


def pulled_there(reach: Reach, image: store.ImageRecord) -> bool:
    """Whether the cluster pulled the image from a registry it was pushed to; one line said for each it could not."""
    for pushed in image.pushed:
        reference = oci.content_reference(pushed["reference"], image.sha256)  # exactly this image, by its digest
        try:
            launcher_line(reach, ["images", "pull", reference, "--expect-sha256", image.sha256, "--cluster",
                                  reach.cluster, *(["--plain-http"] if pushed.get("plain_http") else [])])
            return True
        except UserError as err:
            print(f"[cluster-train] {err.lines[-1]}; sending the image from here instead", file=sys.stderr)
    return False


def launcher_line(reach: Reach, argv: List[str], batch: bool = False) -> str:
    """bin/run-cluster there (with the settings sent for it), its output read here; its refusal raised here as the
    same one line."""
    done = ssh.run(reach, [reach.python, "bin/run-cluster", *argv], cwd=reach.remote_dir,
                   env={"CT_SETTINGS": reach.settings_file}, capture=True, batch=batch)
    if done.returncode != 0:
        said = [line.split("error: ", 1)[-1] for line in done.stderr.splitlines() if line.strip()]
        raise UserError(f"{ssh.where(reach)}: " + (said[-1] if said else
                        f"bin/run-cluster {argv[0]} exited with status {done.returncode}"))
    return done.stdout


def fetch_dir(reach: Reach, remote: str, local: Path, leave: Tuple[str, ...]) -> None:
    """A run directory's files, less what `leave` names, copied here (only what changed since the last fetch)."""
    argv = ["rsync", "--recursive", "--times", "--protect-args", *[f"--exclude={x}" for x in leave], "-e",
            shlex.join(ssh.ssh_argv(reach)), f"{reach.destination}:{remote}/", f"{local}/"]
    done = subprocess.run(argv, text=True, capture_output=True)
    if done.returncode != 0:
        raise UserError(ssh.failure_line(reach, done.stderr))
