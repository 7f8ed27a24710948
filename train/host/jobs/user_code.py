"""Your own training code under run-cluster: the experiment (or `run-cluster CLUSTER PROFILE -- COMMAND ...`) names a
command and a code directory instead of a task; `--dev` runs the tasks from this checkout's train package.

Here the raw experiment becomes a command run's config, the code is snapshotted (train/host/jobs/code_snapshot.py) and
your own config is read through `reads:` (train/host/jobs/reads.py), once, before anything is checked or queued.
"""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from train import config as cfg
from train.errors import UserError
from train.host import project
from train.host.jobs import code_snapshot, reads
from train.host.jobs.code_snapshot import Snapshot
from train.host.schedulers.launches import Launch

TASK_KEYS = ("task", "task_params", "model", "optim")  # mean nothing to a command


@dataclass
class Code:
    """The code a run executes when it is not the image's own: its snapshot and what preflight read of it."""

    snapshot: Snapshot
    read: Optional[reads.UserConfig]


def experiment_raw(raw: Dict[str, Any], command: Optional[List[str]], dev: bool, base: Path) -> Dict[str, Any]:
    """The experiment as a run config: the command line's command and --dev applied, `code` made absolute
    (relative to the experiment file's directory, or to the working directory for a command typed after --)."""
    raw = dict(raw)
    if command:
        raw["command"] = list(command)
        if "code" not in raw:
            raw["code"], base = ".", Path.cwd()
    if dev:
        if raw.get("command"):
            raise UserError("--dev runs the tasks from this checkout's train package, and a command runs your own "
                            "code already; drop --dev")
        raw["code"], base = str(project.ROOT), project.ROOT
    if raw.get("command"):
        defaults = cfg.to_dict(cfg.RunConfig())  # a saved config.yaml (a rerun) holds them all, as defaults
        given = [key for key in TASK_KEYS if key in raw and raw[key] != defaults[key]]
        if given:
            raise UserError(f"the experiment names a command and also {', '.join(given)}, which only a task reads; "
                            f"remove {', '.join(given)} (your code decides its own model and optimizer)")
        raw["data"] = {"root": "", **(raw.get("data") or {})}  # a command's data is bound only where named
        raw.setdefault("name", command_name(raw["command"]))
    if raw.get("code"):
        raw["code"] = str((base / os.path.expanduser(str(raw["code"]))).resolve())
    return raw


def command_name(command: Any) -> str:
    """A job name from the command: its script's stem (train.py -> train), else the program's name."""
    words = [str(w) for w in command] if isinstance(command, list) else [str(command)]
    script = next((w for w in words[1:] if w.endswith(".py")), words[0] if words else "command")
    return Path(script).stem or "command"


def prepare_code(run: cfg.RunConfig, shape: Launch, recorded: Optional[Dict[str, Any]],
                 recorded_in: Optional[Path]) -> Optional[Code]:
    """Snapshot the code (or take a recorded run's snapshot, checked), read the user's config and fill the run
    config with it. None for a run of the image's own code."""
    if not run.code:
        return None
    if run.command and shape.packed:
        raise UserError("launch: independent packs registered tasks; run your command on a profile with one training "
                        "(srun, blaunch or lightning launch)")
    if recorded_in is not None:
        if not recorded:
            raise UserError(f"{recorded_in} ran {run.code} without recording its code snapshot; submit anew")
        snapshot = code_snapshot.from_run(recorded_in, recorded)
    else:
        snapshot = code_snapshot.take(Path(run.code), subtree="" if run.command else "train/", dev=not run.command)
    try:
        found = reads.read(run, lambda name: code_snapshot.read_text(snapshot, name)) if run.command else None
        if run.command:
            reads.apply(run, found, Path(snapshot.source))
    except UserError:
        code_snapshot.discard(snapshot)
        raise
    return Code(snapshot, found)


def summary_lines(run: cfg.RunConfig, code: Optional[Code]) -> List[str]:
    if code is None:
        return []
    snap = code.snapshot
    version = f"git {snap.git_commit[:12]}{' + uncommitted changes' if snap.git_dirty else ''}" if snap.git_commit \
        else "not a git work tree"
    lines = [f"code: {snap.source}{'/' + snap.subtree if snap.subtree else ''} ({version}), snapshot sha256 "
             f"{snap.sha256[:12]}, {snap.files} file(s), {snap.bytes / 1024:.0f} KiB"]
    if snap.dev:
        lines.append("dev: the tasks run from this snapshot of the train package, over the image's own copy")
    if run.command:
        lines.append(f"command: {' '.join(run.command)}")
        missing = reads.unchecked(code.read)
        if missing:
            lines.append(f"not checked ({'no reads: mapping' if not code.read else 'not in reads:'}): "
                         f"{'; '.join(missing)}")
    return lines
