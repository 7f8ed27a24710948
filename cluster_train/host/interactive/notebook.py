"""`run-cluster notebook CLUSTER PROFILE [EXPERIMENT]`: JupyterLab from the pinned image on a compute node.

The notebook is a batch job of the profile like any `run-cluster CLUSTER PROFILE -- COMMAND` run, so it gets what
every job gets (the image's digest checked, the binds, the data image, the environment, the node checks, the
time-limit warning, a run record) without a second way to start a container; its one command is the in-image
launcher `python -m cluster_train.image.notebook`, in the run's code snapshot (--dev: in this directory, live). The
token is written into the run directory (0600) before the job is queued: never on a command line, where `ps` on the
node shows it to every user. Then: the wait in the queue (waiting.py), the server's address from
notebook/server.json, a local port forwarded to it (forward.py), the URL printed, and the foreground held until
Ctrl-C (or SIGTERM, SIGHUP) or the job's end; either way the job is cancelled (recorded as run-cluster's own cancel) and
the allocation released. From a laptop (ssh: in your settings) the same command runs on the login node and the
laptop forwards its port over ssh (laptop.py)."""
import argparse
import dataclasses
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.interactive import forward, waiting
from cluster_train.host.interactive.allocation import shortened
from cluster_train.host.interactive.notebook_common import SERVER, flavor_of, opened, refuse_without_jupyterlab, say
from cluster_train.host.jobs.build import Site, Submission
from cluster_train.host.runs import ending
from cluster_train.host.scheduling.facts import State
from cluster_train.host.usage import Parser

DIR = "notebook"  # in the run directory: token (from here), server.json and warning (from the launcher)
LAUNCHER = ["python", "-m", "cluster_train.image.notebook"]  # contract C1, cluster_train/image/notebook.py
POLL_S = 2.0
STOP_WAIT_S = 90  # how long a cancelled job may take to leave the queue before we stop waiting on it
PROBLEM = re.compile(r"error|not in this image|No module named|Traceback", re.I)  # a log line that says why it ended
NOTICE = "[cluster-train] notebook: the allocation ends soon (the job's time-limit warning came): save your notebooks"


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="run-cluster notebook", description="JupyterLab from the pinned image in a batch job of PROFILE, "
               "its port forwarded here; Ctrl-C stops it and releases the allocation")
    p.add_argument("cluster", help="a name in clusters/ or the path of a cluster YAML file")
    p.add_argument("profile", help="a profile of that cluster: the allocation's shape")
    p.add_argument("experiment", nargs="?", help="an experiment whose code: and data the notebook gets (default: "
                                                  "this directory's code)")
    p.add_argument("--dev", action="store_true", help="the kernel runs in this directory, live, instead of the "
                                                      "run's snapshot of it (edits show at once)")
    p.add_argument("--time", metavar="T", help="a shorter time limit than the profile's, e.g. 01:00:00")
    p.add_argument("--port", type=int, default=0, metavar="LOCAL_PORT",
                   help="the port here the notebook is forwarded to (default: any free one)")
    p.add_argument("--flavor", help="image flavor (default: the one the partition needs)")
    p.add_argument("--stale-image-ok", action="store_true",
                   help="start with an image built from other code than this checkout's (--dev: always)")
    p.add_argument("--run-id", help="name of the run directory (default: time, cluster, profile, random suffix)")
    p.add_argument("--over-ssh", action="store_true", help=argparse.SUPPRESS)  # laptop.py's login-node side
    return p


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a batch system's or a closed terminal's end of this command): ended as Ctrl-C ends it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signame = signal.Signals(signum).name


class Stops:
    """SIGTERM and SIGHUP raised as Stopped, so that the job is cancelled (without them it would outlive this
    command). One that comes while the job is being queued is held until its session exists and raised then, inside
    the `try` that cancels it: raised during the submission, it would leave a job queued that nobody cancels."""

    def __init__(self) -> None:
        self.holding, self.held = False, 0
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.on_signal)

    def on_signal(self, signum, frame) -> None:
        if self.holding:
            self.held = self.held or signum
            return
        raise Stopped(signum)

    def release(self) -> None:
        self.holding = False
        if self.held:
            raise Stopped(self.held)


def queued(sub: Submission, stops: Stops) -> "Session":
    """The notebook's session, its job queued with SIGTERM and SIGHUP held; a failed queueing queued nothing."""
    stops.holding = True
    try:
        return Session.queue(sub, say)
    except BaseException:
        stops.holding = False
        raise


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)
    stops = Stops()
    port = 0 if args.over_ssh else forward.local_port(args.port)  # a taken port: refused before anything queues
    site = Site.load(args.cluster)
    if site.user.get("ssh") and not args.over_ssh:
        from cluster_train.host.interactive import laptop

        return laptop.notebook(site, args, port)
    from cluster_train.host.images import store

    refuse_without_jupyterlab(store.current(flavor_of(site, args), site.image_store))
    sub = submission(site, args)
    for line in sub.warnings:
        print(f"run-cluster: {line}", file=sys.stderr)
    session, by = queued(sub, stops), ""
    try:
        stops.release()  # one that came while it was queued: the job is cancelled below
        if args.over_ssh:  # the laptop's connection is our stdin: its end (Ctrl-C there, a drop) is our Ctrl-C
            threading.Thread(target=interrupt_at_eof, daemon=True).start()
        server = session.server()
        if args.over_ssh:
            say(SERVER + json.dumps({**server, "token": session.token}))
            session.hold()
        else:
            serve_here(session, port, (server["address"], int(server["port"])))
    except KeyboardInterrupt as interrupted:
        by = f" by {interrupted.signame}" if isinstance(interrupted, Stopped) else ""
    finally:
        session.stop()
    say(f"[cluster-train] notebook stopped{by}; job {session.job_id} cancelled, nothing is allocated")
    return 0


def interrupt_at_eof() -> None:
    sys.stdin.read()
    os.kill(os.getpid(), signal.SIGINT)


def serve_here(session: "Session", port: int, target) -> None:
    """On the login node: the relay from 127.0.0.1:port to the node, the URL, then the foreground until the end."""
    relay = forward.relay(port, target)
    try:
        opened(session.server()["host"], port, session.token)
        session.hold()
    finally:
        relay.stop()


def submission(site: Site, args) -> Submission:
    """The notebook's job, built and checked as any run of a command (nothing written yet)."""
    from cluster_train.host.api.job import Job

    command = LAUNCHER
    if args.dev:  # the code directory itself, bound into the container, instead of the run's snapshot of it
        here = str(Path.cwd().resolve())
        command = ["bash", "-c", 'cd -- "$1" && exec "${@:2}"', "notebook", here, *LAUNCHER]
        site = with_cluster(site, binds=[*site.cluster.binds, here])
    # never requeued: nobody would be attached to the next one
    site = shortened(site, dataclasses.replace(site.cluster.profile(args.profile), max_requeues=0), args.time)
    job = Job(args.cluster, args.profile, args.experiment, overrides=["name=notebook"], command=command,
              flavor=args.flavor, run_id=args.run_id, stale_image_ok=args.stale_image_ok or args.dev)
    return job._submission(site, dry_run=False)


def with_cluster(site: Site, **changed) -> Site:
    return dataclasses.replace(site, cluster=dataclasses.replace(site.cluster, **changed))


@dataclasses.dataclass
class Session:
    """A queued notebook job: its scheduler, id, run directory and token; stop() cancels it and waits until the
    queue has let it go."""

    scheduler: object
    job_id: str
    run_dir: Path
    token: str
    said: Callable[[str], None] = say
    found: Optional[Dict] = None

    @classmethod
    def queue(cls, sub: Submission, said: Callable[[str], None]) -> "Session":
        from cluster_train.host.runs.queue import queue

        token = secrets.token_hex(24)
        job_id = queue(sub, before_submit=lambda run_dir: write_token(run_dir, token), interactive="notebook")
        said(f"[cluster-train] notebook: {sub.job.scheduler} job {job_id} queued; run directory {sub.job.work.run_dir}")
        return cls(sub.job.adapter, job_id, Path(sub.job.work.run_dir), token, said)

    def server(self) -> Dict:
        """server.json once the job runs and JupyterLab answers; the job's own words when it ends first."""
        if self.found is None:
            waiting.wait_until_running(self.scheduler, self.job_id, self.said, POLL_S, self.run_dir)
            self.said(f"[cluster-train] notebook: job {self.job_id} running; starting JupyterLab")
            file = self.run_dir / DIR / "server.json"
            while not file.is_file():
                self.still_running("before JupyterLab answered")
                time.sleep(0.5)
            self.found = json.loads(file.read_text())
        return self.found

    def hold(self) -> None:
        """The foreground until Ctrl-C, or the job's end (raised); the time-limit notice said once."""
        warned = False
        while True:
            time.sleep(POLL_S)
            if not warned and (self.run_dir / DIR / "warning").is_file():
                self.said(NOTICE)
                warned = True
            self.still_running("")

    def still_running(self, when: str) -> None:
        state = self.scheduler.state(self.job_id, self.run_dir)
        if state["state"] not in (State.RUNNING, State.UNKNOWN) or state.get("gone"):
            raise UserError(f"notebook job {self.job_id} ended {when or 'by itself'} "
                            f"({getattr(state['state'], 'value', state['state'])}): {last_word(self.run_dir)}")

    def stop(self) -> None:
        """Cancelled, and waited for until it has left the queue (its node is free again)."""
        try:  # recorded as run-cluster's own cancel, so that status does not blame someone else
            ending.cancel([(self.run_dir, self.job_id)], lambda: self.scheduler.cancel(self.job_id, self.run_dir))
        except UserError:  # it ended already
            pass
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            state = self.scheduler.state(self.job_id, self.run_dir)
            if state.get("gone") or state["state"] not in (State.RUNNING, State.PENDING, State.CONFIGURING):
                return
            time.sleep(1)


def write_token(run_dir: Path, token: str) -> None:
    """notebook/token, readable by you alone from its first byte (created 0600, not chmod-ed after)."""
    folder = run_dir / DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(folder / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")


def last_word(run_dir: Path) -> str:
    """What the job's log last said of a problem (the launcher's `JupyterLab is not in this image`), not the
    scheduler's echo of it; else where the log is."""
    from cluster_train.host.runs.follow import logs_text

    lines = [line.strip() for line in logs_text(run_dir).splitlines()]
    problems = [line for line in lines if PROBLEM.search(line) and not line.startswith(("srun:", "slurmstepd:"))]
    return problems[-1] if problems else f"see its log in {run_dir / 'logs'}"
