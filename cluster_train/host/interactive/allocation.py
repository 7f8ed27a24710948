"""An interactive session's allocation, made from the job a normal submission would queue: the same resolution and
checks (cluster_train/host/jobs), the image's bytes checked against its digest here before anything is queued (the
node checks them again), the run directory written, and the session's script rendered (templates/interactive.sh.j2:
the batch job's checks and environment, then a command in the container). Then the allocation is held, waited for,
entered on its first node, and released however the session ends. Prints nothing: `say` is the caller's."""
import dataclasses
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.clusters import Profile
from cluster_train.host.images import store
from cluster_train.host.jobs.build import Site, Submission
from cluster_train.host.jobs.render import render
from cluster_train.host.jobs.resolve import seconds
from cluster_train.host.interactive.waiting import pending_line, wait_until_running
from cluster_train.host.runs import ending, queue
from cluster_train.host.schedulers import FINISHED, Scheduler, State, adapter

SCRIPT = "interactive.sh"  # in the run directory: what runs on the node, the session's command as its arguments
RELEASE_S = 30  # how long a cancelled allocation may take to leave the queue


@dataclass(frozen=True)
class Prepared:
    sub: Submission
    scheduler: Scheduler
    run_dir: Path

    @property
    def script(self) -> Path:
        return self.run_dir / SCRIPT


def prepare(sub: Submission, site: Site) -> Prepared:
    """The session's run directory, written once every check has passed; nothing is queued yet. A --time was
    decided before the job was built (`shortened`): the checks, the script and the record all see the one limit."""
    job = sub.job
    scheduler = job.adapter
    if scheduler.session is None:
        raise UserError(f"the {scheduler.name} scheduler has no interactive allocations here; use a batch job "
                        f"(run-cluster {job.cluster} {job.profile} -- COMMAND)")
    store.verified(job.image.sha256, site.image_store, f"the {job.image.flavor} image")
    run_dir = queue.write_run(sub)
    (run_dir / SCRIPT).write_text(render(job, "interactive.sh.j2"))
    return Prepared(sub, scheduler, run_dir)


def shortened(site: Site, profile: Profile, time_limit: Optional[str]) -> Site:
    """The site with `profile` as the session runs it: --time, a limit in the scheduler's own format no longer than
    the profile's, with its time-limit warning moved to halfway where it would come at the start; decided once,
    before the job is built and checked."""
    if time_limit:
        scheduler = adapter(site.cluster.scheduler)
        asked_s, limit_s = seconds(scheduler, time_limit), seconds(scheduler, profile.time or scheduler.default_time)
        if not asked_s:
            raise UserError(f"--time {time_limit!r} is not a {scheduler.title or scheduler.name} time limit; give one "
                            f"such as {scheduler.time_example}")
        if limit_s and asked_s > limit_s:
            shown = profile.time or scheduler.default_time
            raise UserError(f"--time {time_limit} is longer than the profile's time limit {shown}; --time only "
                            f"shortens the allocation: give {shown} or less")
        profile = dataclasses.replace(profile, time=time_limit, grace_s=min(profile.grace_s, asked_s // 2))
    cluster = dataclasses.replace(site.cluster, profiles={**site.cluster.profiles, profile.name: profile})
    return dataclasses.replace(site, cluster=cluster)


def run_session(prepared: Prepared, command: List[str], tty: bool, say: Callable[[str], None]) -> int:
    """`command` in the container on the allocation's first node; its exit status. The allocation is released when
    it ends, also on Ctrl-C or an error."""
    scheduler, session, job = prepared.scheduler, prepared.scheduler.session, prepared.sub.job
    step = ["bash", str(prepared.script), *command]
    if not session.holds:  # the scheduler asks for the allocation and ends it with the command (LSF's bsub -Is)
        code = None
        try:
            code = ended_by_itself(prepared, session.enter(scheduler, job, "", step, tty), say)
            return code
        finally:  # its job id is known once bsub has asked for it; none: nothing was queued, nothing is kept
            recorded(prepared, session.job_id(job), code)
    try:
        job_id = session.hold(scheduler, job, prepared.run_dir)
    except BaseException:
        runs.discard(prepared.run_dir)
        raise
    queue.write_manifest(prepared.sub, job_id)
    try:
        nodes = wait_until_running(scheduler, job_id, say, poll_s=1.0, run_dir=prepared.run_dir).get("nodes", "")
        say(f"[cluster-train] job {job_id} running on {nodes}; the session starts on its first node")
        code = subprocess.run(session.enter(scheduler, job, job_id, step, tty)).returncode
        ending.record_session_end(prepared.run_dir, job_id, code)  # the release below is not what ended it
        return code
    finally:
        release(scheduler, job_id, prepared.run_dir)


def recorded(prepared: Prepared, job_id: str, code: Optional[int]) -> None:
    """The session's manifest, and its command's exit status where it ended by itself (None: interrupted)."""
    if not job_id:
        runs.discard(prepared.run_dir)
        return
    queue.write_manifest(prepared.sub, job_id)
    if code is not None:
        ending.record_session_end(prepared.run_dir, job_id, code)


def ended_by_itself(prepared: Prepared, argv: List[str], say: Callable[[str], None], poll_s: float = 2.0) -> int:
    """A scheduler's command that holds the allocation and ends it itself (bsub -I): Ctrl-C reaches it too (the
    terminal's process group), and it ends its job; killing it first would leave the job to run on."""
    proc = subprocess.Popen(argv)
    try:
        said_pending(prepared, proc, say, poll_s)
        return proc.wait()
    except KeyboardInterrupt:
        try:
            proc.wait(RELEASE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def said_pending(prepared: Prepared, proc: subprocess.Popen, say: Callable[[str], None], poll_s: float) -> None:
    """While the scheduler's own command waits for the allocation: the job's pending reason and start estimate,
    said on each change as for a held allocation; done once it runs or the command has ended."""
    scheduler, job = prepared.scheduler, prepared.sub.job
    said = job_id = ""
    while True:
        try:
            proc.wait(poll_s)
            return
        except subprocess.TimeoutExpired:
            pass
        job_id = job_id or scheduler.session.job_id(job)
        state = scheduler.state(job_id, prepared.run_dir) if job_id else {"state": State.PENDING}
        if state["state"] != State.PENDING:
            return
        line = pending_line(job_id, state) if job_id else ""
        if line != said:
            say(line)
            said = line


def release(scheduler: Scheduler, job_id: str, run_dir: Path) -> None:
    """Cancel the allocation and wait until the scheduler has let it go (a completing job is still queued)."""
    if not ending.has_ended(scheduler.state(job_id, run_dir)):  # one that ended (its time limit, a cancel) is
        try:  # not this release's: recorded as run-cluster's own, so that status does not blame someone else for it
            ending.release(run_dir, job_id, lambda: scheduler.cancel(job_id, run_dir))
        except UserError:
            pass  # it ended meanwhile: the wait below tells
    deadline = time.time() + RELEASE_S
    while time.time() < deadline:
        state = scheduler.state(job_id, run_dir)
        if state["state"] in FINISHED or state.get("gone"):
            return
        time.sleep(0.5)
    raise UserError(f"job {job_id} was cancelled but is still in the queue after {RELEASE_S} s; check it with "
                    f"{scheduler.name} tools and cancel it again")
