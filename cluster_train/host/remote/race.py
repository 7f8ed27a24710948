"""`run-cluster --first-to-start CLUSTER:PROFILE CLUSTER:PROFILE ...`: the race across clusters once every entry is
checked (cluster_train/host/api/race.py). Each entry is a Contender: a run of this machine's scheduler (queued as any
run is) or one on a cluster your settings reach over SSH (queued, polled and cancelled by that login node's
bin/run-cluster, as `status` and `cancel` of such a run are). All are queued, the first to start is kept, the rest are
cancelled, and every run records which won and each one's wait (its manifest; over SSH the laptop's record too)."""
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import project, runs
from cluster_train.host.jobs.build import Submission
from cluster_train.host.reach import Reach
from cluster_train.host.remote import commands as remote, ssh, sync
from cluster_train.host.runs import ending
from cluster_train.host.runs.queue import queue, submitted
from cluster_train.host.runs.run_status import RunStatus
from cluster_train.host.schedulers import NOT_STARTED, adapter

SUBMITTED = re.compile(r"^submitted (\S+) job (\S+); run directory", re.M)  # what a queued run says (queue.py)
# the run's manifest there, given the race's outcome: the login node's own runs module writes it, as it does here
RECORD_THERE = ("import json, sys; from cluster_train.host import runs; "
                "runs.update_manifest(runs.find(sys.argv[1]), first_to_start=json.loads(sys.argv[2]))")


@dataclass
class Contender:
    """One entry of the race, checked and ready to queue."""

    entry: str  # CLUSTER:PROFILE as given
    cluster: str
    run_id: str
    run_dir: Path  # its directory here: the run itself, or the laptop's record of a run over SSH
    summary: str
    queue: Callable[[], Tuple[str, str]]  # queues it: (its job id, what the command line says of it)
    started: Callable[[str], bool]  # whether the scheduler has started the job of that id
    cancel: Callable[[str], None]
    record: Callable[[Dict], None]  # writes the race's outcome into the run's records
    warnings: List[str] = field(default_factory=list)
    discard: Callable[[], None] = lambda: None  # a dry run: drop what preparing took


def here(entry: str, sub: Submission) -> Contender:
    """A run of a cluster this machine submits to itself (its login node, or local)."""
    run_dir = Path(sub.job.work.run_dir)
    scheduler = adapter(sub.job.scheduler)

    def queued() -> Tuple[str, str]:
        job_id = queue(sub)
        return job_id, submitted(sub, job_id)

    def cancel(job_id: str) -> None:
        ending.cancel([(run_dir, job_id)], lambda: scheduler.cancel(job_id, run_dir))

    return Contender(entry, sub.job.cluster, run_dir.name, run_dir, sub.summary, queued,
                     started=lambda job_id: scheduler.state(job_id, run_dir)["state"] not in NOT_STARTED,
                     cancel=cancel, record=lambda outcome: runs.update_manifest(run_dir, first_to_start=outcome),
                     warnings=list(sub.warnings), discard=sub.discard)


def over_ssh(entry: str, reach: Reach, argv: List[str], run_id: str, summary: str, warnings: List[str]) -> Contender:
    """A run on a cluster reached over SSH whose login node has checked it (its dry run) and holds the image: `argv`
    queues it there (bin/run-cluster's words, without --run-id)."""
    where = ssh.where(reach)

    def queued() -> Tuple[str, str]:
        done = remote.launch(reach, [*argv, "--no-wait"], run_id, False, capture=True)
        if done.returncode:
            raise remote.refused(reach, done)
        said = SUBMITTED.search(done.stdout)
        job_id = said.group(2) if said else state_there(reach, run_id).job_id
        scheduler = f"{said.group(1)} " if said else ""
        return job_id, f"{where}: submitted {scheduler}job {job_id}; run {run_id}"

    return Contender(entry, reach.cluster, run_id, project.run_dir_for(run_id), summary, queued,
                     started=lambda _: state_there(reach, run_id).state not in NOT_STARTED,
                     cancel=lambda _: sync.launcher_line(reach, ["cancel", run_id]),
                     record=lambda outcome: record_there(reach, run_id, outcome), warnings=warnings)


def state_there(reach: Reach, run_id: str) -> RunStatus:
    """The run's status as its login node's `status --json` gives it (over the shared connection)."""
    said = sync.launcher_line(reach, ["status", "--json", run_id])
    return RunStatus.from_dict(json.loads(said.strip().splitlines()[-1]))


def record_there(reach: Reach, run_id: str, outcome: Dict) -> None:
    """The outcome in the run's manifest on the cluster and in the laptop's record of it (runs/<id>/remote.json)."""
    done = ssh.run(reach, [reach.python, "-c", RECORD_THERE, run_id, json.dumps(outcome)], cwd=reach.remote_dir,
                   env={"CT_SETTINGS": reach.settings_file}, capture=True)
    if done.returncode:
        raise UserError(f"{ssh.where(reach)}: the race's outcome was not recorded in run {run_id}'s manifest: "
                        f"{(done.stderr.strip().splitlines() or ['it said nothing'])[-1]}")
    file = project.run_dir_for(run_id) / remote.RECORD
    file.write_text(json.dumps({**json.loads(file.read_text()), "first_to_start": outcome}, indent=2) + "\n")


def race_across(contenders: List[Contender], timeout_s: float, poll_s: float = 1.0) -> List[str]:
    """Queue every contender, keep the first to start, cancel the rest, record the outcome in every run; what the
    command line says. A failure while queuing cancels what was queued (nothing is left allocated)."""
    queued: List[Tuple[Contender, str, float]] = []
    said = []
    try:
        for contender in contenders:
            job_id, line = contender.queue()
            queued.append((contender, job_id, time.time()))
            said.append(line)
    except BaseException:
        withdraw(queued)
        raise
    try:
        winner, waits = first_started(queued, timeout_s, poll_s)
    except KeyboardInterrupt:  # the race abandoned (a timeout instead leaves all queued, as it says)
        withdraw(queued)
        raise UserError(f"interrupted: cancelled {listed(queued)}; nothing of the race is left queued") from None
    outcome = {"winner_run": queued[winner][0].run_id, "winner_cluster": queued[winner][0].cluster,
               "runs": [{"entry": c.entry, "cluster": c.cluster, "run": c.run_id, "job_id": job_id,
                         "wait_s": round(waits[i], 1), "won": i == winner} for i, (c, job_id, _) in enumerate(queued)]}
    for i, (contender, _, _) in enumerate(queued):
        contender.record({**outcome, "won": i == winner})
    return [*said, told(outcome)]


def first_started(queued: List[Tuple[Contender, str, float]], timeout_s: float,
                  poll_s: float) -> Tuple[int, Dict[int, float]]:
    """The index of the first to start (on a tie the first listed) and each one's wait in seconds: from its
    submission to its start, or to its cancel; the others cancelled."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for winner, (contender, job_id, at) in enumerate(queued):
            if contender.started(job_id):
                waits = {winner: time.time() - at}
                for i, (loser, loser_job, loser_at) in enumerate(queued):
                    if i != winner:
                        loser.cancel(loser_job)
                        waits[i] = time.time() - loser_at
                return winner, waits
        time.sleep(poll_s)
    raise UserError(f"none of {listed(queued)} started within {timeout_s:.0f} s; all are still queued")


def withdraw(queued: List[Tuple[Contender, str, float]]) -> None:
    for contender, job_id, _ in queued:
        contender.cancel(job_id)


def listed(queued: List[Tuple[Contender, str, float]]) -> str:
    return ", ".join(f"{c.entry} (job {job_id})" for c, job_id, _ in queued)


def told(outcome: Dict) -> str:
    """The command line's line on the race: which cluster won, after how long, and what was cancelled."""
    won = next(r for r in outcome["runs"] if r["won"])
    lost = "; ".join(f"cancelled {r['entry']} (job {r['job_id']}, after {r['wait_s']:.0f} s)"
                     for r in outcome["runs"] if not r["won"])
    return (f"{won['entry']} started first on {won['cluster']} (job {won['job_id']}, run {won['run']}, after "
            f"{won['wait_s']:.0f} s); {lost}")
