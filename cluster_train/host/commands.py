"""Every `run-cluster` command, as data: its name, where it runs ("module:function", imported only when it runs: a
command never pays for another's imports, and a dry run answers at once), its group and its one line of --help.
`run-cluster --help` and the bash completion (cluster_train/host/completion.py) are made from this table."""
import importlib
from typing import List, NamedTuple, Optional


class Command(NamedTuple):
    name: str
    target: str  # "module:function", called with the arguments after the command's name
    group: str
    summary: str
    takes_name: bool = False  # status, logs, cancel and resume share one function, which reads the name


GROUPS = ("run", "watch", "results", "images and data", "sites")
RUNS = "cluster_train.host.views.commands:run_command"
COMMANDS = (
    Command("resume", RUNS, "run", "continue a run from its last checkpoint, on its profile or another", True),
    Command("cancel", RUNS, "run", "cancel a run's job (a sweep's: every element) and record it cancelled", True),
    Command("shell", "cluster_train.host.interactive.shell:main", "run",
            "a shell (or --command CMD) in the pinned image on a compute node of the profile's shape"),
    Command("names", "cluster_train.host.cli:names", "run",
            "every name an experiment may use: models, data sets, tasks, strategies, optimizers, ..."),
    Command("notebook", "cluster_train.host.interactive.notebook:main", "run",
            "JupyterLab from the image on a compute node, forwarded here; Ctrl-C releases the allocation"),
    Command("status", RUNS, "watch", "a run's state, asked of its scheduler (a sweep's: each element's)", True),
    Command("logs", RUNS, "watch", "a run's log (--follow: as it grows, until the job ends)", True),
    Command("runs", "cluster_train.host.views.table:main", "watch",
            "every run: this machine's, and each cluster's over SSH"),
    Command("fetch", "cluster_train.host.remote.commands:fetch_command", "results",
            "a run on a cluster over SSH: its results, metrics and logs copied here"),
    Command("sync", "cluster_train.host.runs.tracker_sync:main", "results",
            "upload what a run's trackers logged offline"),
    Command("report", "cluster_train.host.reports.report:main", "results",
            "report.html of a run or a sweep: curves, results, config, image, code, segments"),
    Command("compare", "cluster_train.host.reports.compare:main", "results",
            "what differs between runs: config keys, images, code versions, metrics"),
    Command("scaling", "cluster_train.host.reports.scaling:main", "results",
            "scaling efficiency of profiles against 1 GPU (scaling.json, .png)"),
    Command("images", "cluster_train.host.images.commands:main", "images and data",
            "the image store: list, import, push, pull, verify, sign, derive"),
    Command("data", "cluster_train.host.data.commands:main", "images and data",
            "data sets packed as images: pack, import, push, pull, list, verify"),
    Command("probe-data", "cluster_train.host.probe_data:main", "images and data",
            "host RAM per dataloader worker of an experiment, measured"),
    Command("doctor", "cluster_train.host.doctor:main", "sites", "can a job run on CLUSTER from this machine?"),
    Command("init-cluster", "cluster_train.host.init_cluster:main", "sites",
            "draft a cluster file from the scheduler of the login node it runs on"),
    Command("check-cluster", "cluster_train.host.cli:check_cluster_command", "sites",
            "a cluster file checked on its own"),
    Command("completion", "cluster_train.host.completion:main", "sites",
            "bash completion of commands, clusters, profiles: eval \"$(run-cluster completion bash)\""),
)
BY_NAME = {command.name: command for command in COMMANDS}
SUBMIT = ("CLUSTER PROFILE [EXPERIMENT]", "check, render and submit a training job (the options above)")


def find(argv: List[str]) -> Optional[Command]:
    return BY_NAME.get(argv[0]) if argv else None


def run(command: Command, argv: List[str]) -> int:
    """The command's function, imported now; argv starts with the command's name."""
    module, function = command.target.split(":")
    return getattr(importlib.import_module(module), function)(argv if command.takes_name else argv[1:])


def listing() -> str:
    """The commands, grouped, one line each: the epilog of `run-cluster --help`."""
    width = max(len(command.name) for command in COMMANDS) + 2
    lines = ["commands (run-cluster COMMAND --help for each):"]
    for group in GROUPS:
        lines.append(f"  {group}:")
        if group == "run":
            lines.append(f"    {SUBMIT[0]}  {SUBMIT[1]}")
        lines += [f"    {c.name:<{width}}{c.summary}" for c in COMMANDS if c.group == group]
    return "\n".join(lines)
