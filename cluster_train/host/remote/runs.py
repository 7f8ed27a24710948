"""A run that lives on a cluster reached over SSH, seen from here through the record its submission left in this
machine's runs/<id> (remote.json): each question is the cluster's own `bin/run-cluster` command on the run's id, as
the command line proxies it (cluster_train/host/remote/commands.py), its answer read here. `Run`
(cluster_train/host/api/run.py) uses these for such a run, so that it behaves as a run of this machine does."""
import json
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

from cluster_train.host.scheduling.job import new_run_id
from cluster_train.host.remote import commands, sync
from cluster_train.host.runs.run_status import RunStatus

POLL_S = 5.0  # each question is an SSH command (over the shared connection): a follow asks less often than here


def ask(record: Dict, argv: List[str]) -> str:
    """The cluster's bin/run-cluster on this run; its output (its refusal raised here as the same line)."""
    return sync.launcher_line(commands.reached(record), argv)


def status(record: Dict) -> RunStatus:
    said = ask(record, ["status", "--json", record["run_id"]])
    return RunStatus.from_dict(json.loads(said.strip().splitlines()[-1]))


def logs(record: Dict) -> str:
    return ask(record, ["logs", record["run_id"]])


def follow(record: Dict, poll_s: float = POLL_S) -> Iterator[str]:
    """What the logs gained at each poll, until the job has ended (then all that is left)."""
    seen = 0
    while True:
        ended = status(record).ended
        text = logs(record)
        yield text[seen:]
        seen = len(text)
        if ended:
            return
        time.sleep(poll_s)


def cancel(record: Dict) -> str:
    return ask(record, ["cancel", record["run_id"]]).strip()


def resume(record: Dict, profile: Optional[str], overrides: Sequence[str]) -> None:
    ask(record, ["resume", record["run_id"], "--no-wait", *(["--profile", profile] if profile else []),
                 *(f"--set={o}" for o in overrides)])


def rerun(record: Dict, overrides: Sequence[str]) -> Path:
    """A new run there of the recorded one; its record here (runs/<new id>)."""
    reach = commands.reached(record)
    run_id = new_run_id(reach.cluster, "rerun")
    sync.launcher_line(reach, ["--rerun", record["run_id"], "--run-id", run_id, "--no-wait",
                               *(f"--set={o}" for o in overrides)])
    return commands.write_record(reach, run_id)


def fetch(record: Dict, into: Path) -> Path:
    """The run's small files (results, metrics, logs, manifest, config) copied here, as report fetches them."""
    return commands.fetch(record, into)
