"""`run-cluster resume runs/<id> [--profile P] [--set k=v ...]`: the same run continued by hand after it ended
(TIMEOUT with every requeue used, FAILED, CANCELLED, NODE_FAIL, PREEMPTED): same run directory, same config but for
the given keys (recorded), same image digest, verified; training starts from the run's own checkpoints/last.ckpt."""
import time
from pathlib import Path
from typing import List, Optional, Sequence

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.images.locations import run_image
from cluster_train.host.jobs import user_code
from cluster_train.host.jobs.build import Request, Site, Submission, build
from cluster_train.host.jobs.overrides import Overrides, typed_overrides
from cluster_train.host.runs import closing, segments, sweep_state
from cluster_train.host.runs.kept import kept_settings
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.runs.ending import describe, has_ended, run_state
from cluster_train.host.schedulers import State

# Strategies whose checkpoint loads on any number of ranks (fsdp saves full state dicts, re-sharded at load).
# DeepSpeed's ZeRO files partition the optimizer state per rank (on another rank count it would restart): for those
# a new shape is refused.
RESHARDABLE = ("single", "ddp", "fsdp")


def prepare_resume(run_dir: Path, profile: Optional[str], overrides: Overrides, dry_run: bool,
                   site: Optional[Site] = None) -> Submission:
    """The run continued: its config with `overrides`, its image and code, on its profile or `profile`; `site`: the
    cluster file and settings a sweep's resume read once for all its elements."""
    manifest = runs.read_manifest(run_dir)
    scheduler = manifest.adapter
    state = run_state(scheduler, manifest.job_id, run_dir)
    if not has_ended(state):
        raise UserError(f"{run_dir} is {state['state'].value}, not ended; wait for it or cancel it "
                        f"(bin/run-cluster cancel {run_dir}) before resuming")
    if state["state"] == State.COMPLETED:
        more_epochs(run_dir, recorded_trainer(manifest, run_dir)["max_epochs"],
                    cfg.load(run_dir / "config.yaml", overrides).trainer.max_epochs)
    site = site or Site.load(manifest.cluster_file)
    pulled: List[str] = []  # the image pulled from its registry first: said among the submission's warnings
    record = run_image(manifest, f"the image of {run_dir}", site.image_store, pulled)
    profile = profile or manifest.profile
    overrides = {**kept_settings(manifest, site.cluster.profile(profile)), **typed_overrides(overrides)}
    sub = build(site, Request(profile, str(run_dir / "config.yaml"), overrides,
                              run_dir=run_dir, flavor=record.flavor, image=record, dry_run=dry_run,
                              recorded_code=manifest.code, code_from=run_dir,
                              data_sha256=manifest.data_digest))
    sub.warnings[:0] = pulled
    reshardable(recorded_ranks(manifest, run_dir), sub)
    if scheduler.after_directive("0") is None and sweep_state.holding(run_dir):
        sub.warnings.append(f"warning: {scheduler.name} cannot hold {run_dir.name}'s job until the rest of its sweep "
                            f"has ended: it may run beside the array's tasks, beyond --max-parallel")
    if state["state"] == State.UNKNOWN:  # ended, but no one recorded how: say so rather than guess
        sub.warnings.append(f"warning: {run_dir.name} ended {describe(state)}; resuming it")
    return sub


def recorded_trainer(manifest: Manifest, run_dir: Path) -> dict:
    """The run's trainer settings, as its manifest recorded its config (config.yaml, for a manifest without); a
    command run records only the keys it set (cluster_train/host/jobs/user_code.py), the rest are the defaults."""
    recorded = manifest.config.get("trainer")
    if not recorded:
        return cfg.to_dict(cfg.load(run_dir / "config.yaml"))["trainer"]
    return {**cfg.to_dict(cfg.RunConfig())["trainer"], **recorded}


def recorded_ranks(manifest: Manifest, run_dir: Path) -> int:
    """How many ranks the run trained on."""
    trainer = recorded_trainer(manifest, run_dir)
    return trainer["devices"] * trainer["num_nodes"]


def more_epochs(run_dir: Path, trained: int, asked: int) -> None:
    """Refuse to resume a COMPLETED run that would train nothing new: its next segment would only validate again and
    log its last row twice."""
    if asked <= trained:
        raise UserError(f"{run_dir.name} is COMPLETED: it trained all {trained} epoch(s) and resuming it with "
                        f"trainer.max_epochs={asked} would train nothing; to train longer, raise the epochs: "
                        f"bin/run-cluster resume {run_dir} --set trainer.max_epochs={trained * 2}")


def reshardable(old_ranks: int, sub: Submission) -> None:
    """Refuse a new rank count for a strategy whose saved state cannot be re-sharded to it."""
    new_ranks = sub.job.total_ranks
    if new_ranks != old_ranks and sub.run.trainer.strategy not in RESHARDABLE:
        raise UserError(f"strategy {sub.run.trainer.strategy} saved its state over {old_ranks} rank(s) and cannot "
                        f"re-shard it to {new_ranks}; resume on a {old_ranks}-rank profile, or use one of "
                        f"{', '.join(RESHARDABLE)}")


def queue_resume(sub: Submission, run_dir: Path) -> str:
    """Write the (changed) config and script into the same run directory, submit, record the resume. A sweep's
    element waits for what of its sweep still runs (sweep_state.holding): at most --max-parallel at once still."""
    manifest = runs.read_manifest(run_dir)
    scheduler = sub.job.adapter
    held = sweep_state.holding(run_dir)
    number = len(manifest.resumes) + 1
    close_last_segment(run_dir, manifest)  # before the next segment starts
    old_script = run_dir / "job.sh"
    if old_script.is_file():
        old_script.rename(run_dir / f"job.{number - 1}.sh")  # every script that ran stays
    user_code.dump_config(sub.run, sub.job.work.config_path)
    (run_dir / "job.sh").write_text(held_script(sub.script, scheduler, held))
    job_id = scheduler.submit(run_dir / "job.sh", run_dir)
    resume = {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "job_id": job_id, "profile": sub.job.profile,
              "overrides": cfg.setting_lines(sub.overrides), "previous_job_id": manifest.job_id,
              **({"after": held} if held else {})}
    runs.update_manifest(run_dir, resumes=manifest.resumes + [resume], profile=sub.job.profile,
                         scheduler={**manifest["scheduler"], "job_id": job_id}, job=sub.job.as_dict(),
                         config=user_code.recorded_config(sub.run))
    return job_id


def close_last_segment(run_dir: Path, manifest: Manifest) -> None:
    """An open last segment (its batch shell killed before it recorded an end) closed as `status` closes it, from the
    scheduler's account (its end time and exit), else from the word of the cancel or the scheduler."""
    previous = manifest.adapter
    ended = run_state(previous, manifest.job_id, run_dir)
    found = segments.read(run_dir)
    if found and not found[-1].how:
        closing.closed(ended, run_dir, found, closing.run_allocations(previous, manifest))
    segments.record_unended_end(run_dir, ended["state"].value, describe(ended))


def held_script(script: str, scheduler, held: Sequence[str]) -> str:
    """The job script holding the job until every job of `held` has ended, however: a line before its first
    directive."""
    line = scheduler.after_directive(":".join(held)) if held else None
    if line is None:
        return script
    lines = script.splitlines(keepends=True)
    first = next(i for i, text in enumerate(lines) if text.startswith(scheduler.directive_prefix))
    return "".join([*lines[:first], f"{line}\n", *lines[first:]])


def resumed_line(sub: Submission, run_dir: Path, job_id: str) -> str:
    """What the command line says of a resume it queued (and what it waits for)."""
    held = runs.read_manifest(run_dir).resumes[-1].get("after")
    waits = f", after job {', '.join(held)} (its sweep runs at most --max-parallel at once)" if held else ""
    return f"resumed {run_dir.name} as {sub.job.scheduler} job {job_id}{waits}"
