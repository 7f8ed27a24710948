"""Your own training code under run-cluster: the experiment (or `run-cluster CLUSTER PROFILE -- COMMAND ...`) names a
command and a code directory instead of a task; `--dev` runs the tasks from this checkout's cluster_train package.

Here the raw experiment becomes a command run's config, the code is snapshotted
(cluster_train/host/jobs/code_snapshot.py) and your own config is read through `reads:`
(cluster_train/host/jobs/reads.py), once, before anything is checked or queued.
"""
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.jobs import code_snapshot, reads
from cluster_train.host.jobs.code_snapshot import Snapshot
from cluster_train.host.scheduling.launches import Launch

TASK_KEYS = ("task", "task_params", "model", "optim")  # mean nothing to a command
# what a command run is, recorded whatever their values: its name and directory, its command and code, and the shape
# its ranks were started with (resume compares ranks; a 1x1 job's would otherwise be left out as defaults)
RECORDED = ("name", "output_dir", "command", "code", "trainer.devices", "trainer.num_nodes")
FIRST = ("name", "command", "code", "reads")
SCRIPTS = (".py", ".sh")  # what a command's first such argument names: the script it runs


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
            raise UserError("--dev runs the tasks from this checkout's cluster_train package, "
                            "and a command runs your own "
                            "code already; drop --dev")
        raw["code"], base = str(project.ROOT), project.ROOT
    if raw.get("command"):
        defaults = cfg.to_dict(cfg.RunConfig())  # an older run's config.yaml (a rerun) holds them all, as defaults
        given = [key for key in TASK_KEYS if key in raw and raw[key] != defaults[key]]
        if given:
            raise UserError(f"the experiment names a command and also {', '.join(given)}, which only a task reads; "
                            f"remove {', '.join(given)} (your code decides its own model and optimizer)")
        raw["data"] = {"root": "", **(raw.get("data") or {})}  # a command's data is bound only where named
        if raw["data"]["root"]:  # relative to the experiment file, as code: is (not to cluster-train's checkout)
            raw["data"]["root"] = str((base / os.path.expanduser(str(raw["data"]["root"]))).resolve())
        raw.setdefault("name", command_name(raw["command"]))
    if raw.get("code"):
        raw["code"] = str((base / os.path.expanduser(str(raw["code"]))).resolve())
    return raw


def typed_data_root(raw: Dict[str, Any], user_set: Dict[str, Any]) -> Dict[str, Any]:
    """A command's `--set data.root=DIR` relative to where it was typed, as --data DIR is (submit.py): it was taken
    relative to cluster-train's checkout (absolute_inputs), so `--set data.root=data` from a project bound
    cluster-train's own data/ directory without a word."""
    root = user_set.get("data.root")
    if not raw.get("command") or not isinstance(root, str) or not root or os.path.isabs(os.path.expanduser(root)):
        return user_set
    return {**user_set, "data.root": str((Path.cwd() / os.path.expanduser(root)).resolve())}


def recorded_config(run: cfg.RunConfig) -> Dict[str, Any]:
    """What config.yaml and the manifest keep of a run: a task's whole config; a command's command, code, binds, shape
    and the keys it set, without the task defaults (resnet_cifar, sgd, max_epochs 3 are no part of what it ran).
    Loaded again (a rerun, the image) the left-out keys come back as defaults, which a command does not read."""
    whole = cfg.to_dict(run)
    if not run.command:
        return whole
    kept = set_keys(whole, cfg.to_dict(cfg.RunConfig()), "")
    return {**{k: kept[k] for k in FIRST if k in kept}, **kept}  # what it runs first, for a reader


def set_keys(tree: Dict[str, Any], defaults: Dict[str, Any], prefix: str) -> Dict[str, Any]:
    """The keys of `tree` that differ from `defaults` (or that RECORDED names), sections recursed, empty ones left
    out: "" (no data bind), {} (no params)."""
    kept: Dict[str, Any] = {}
    for key, value in tree.items():
        dotted = prefix + key
        if key in TASK_KEYS and not prefix:
            continue
        if isinstance(value, dict) and isinstance(defaults.get(key), dict) and not key.endswith("params"):
            value = set_keys(value, defaults[key], dotted + ".")
            if value:
                kept[key] = value
        elif dotted in RECORDED or (value != defaults.get(key) and value not in ("", {}, [])):
            kept[key] = value
    return kept


def dump_config(run: cfg.RunConfig, path: Path) -> None:
    """config.yaml: what the job's image loads (cluster_train/shared/config.py load()) and a rerun starts from."""
    Path(path).write_text(yaml.safe_dump(recorded_config(run), sort_keys=False))


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
        snapshot = code_snapshot.take(Path(run.code), subtree="" if run.command else "cluster_train/",
                                      dev=not run.command)
    try:
        if run.command:
            script_is_in(snapshot, run.command)
        found = reads.read(run, lambda name: code_snapshot.read_text(snapshot, name)) if run.command else None
        if run.command:
            reads.apply(run, found, Path(snapshot.source))
    except UserError:
        code_snapshot.discard(snapshot)
        raise
    return Code(snapshot, found)


def script_is_in(snapshot: Snapshot, command: List[str]) -> None:
    """The script a command runs is in the snapshot, where the job will look for it (a typo would fail only after
    the wait in the queue)."""
    script = script_of(command)
    if script and not os.path.isabs(script) and not code_snapshot.holds(snapshot, script):
        raise UserError(f"command: {script} is not a file of the code snapshot of {snapshot.source} "
                        f"({snapshot.files} file(s)); fix its name, or run from (code:) the directory that holds it")


def script_of(command: List[str]) -> str:
    """The command's script: its first argument ending in .py or .sh, else the program itself where it is a path
    (./train.sh); "" for none (python -m package, a program of the image)."""
    words = [str(w) for w in command]
    script = next((w for w in words[1:] if w.endswith(SCRIPTS) and not w.startswith("-")), "")
    return script or (words[0] if words and "/" in words[0] else "")


def shown(command: List[str]) -> str:
    """The command as a shell would take it, one line: arguments quoted where needed, control characters escaped
    ($'a\\nb'), so a newline in an argument cannot pass for another line of the summary."""
    return " ".join("$'" + w.encode("unicode_escape").decode().replace("'", "\\'") + "'"
                    if any(ord(c) < 32 or ord(c) == 127 for c in w) else shlex.quote(w) for w in map(str, command))


def summary_lines(run: cfg.RunConfig, code: Optional[Code]) -> List[str]:
    if code is None:
        return []
    snap = code.snapshot
    version = f"git {snap.git_commit[:12]}{' + uncommitted changes' if snap.git_dirty else ''}" if snap.git_commit \
        else "not a git work tree"
    lines = [f"code: {snap.source}{'/' + snap.subtree if snap.subtree else ''} ({version}), snapshot sha256 "
             f"{snap.sha256[:12]}, {snap.files} file(s), {snap.bytes / 1024:.0f} KiB"]
    if snap.dev:
        lines.append("dev: the tasks run from this snapshot of the cluster_train package, over the image's own copy")
    if run.command:
        lines.append(f"command: {shown(run.command)}")
        missing = reads.unchecked(code.read)
        if missing:
            lines.append(f"not checked ({'no reads: mapping' if not code.read else 'not in reads:'}): "
                         f"{'; '.join(missing)}")
    return lines
