"""A job: what to train (an experiment and overrides, or your own command) on which cluster and profile, checked in
full before anything is queued. The command line's new runs, sweeps, races of two profiles and reruns are made here
(cluster_train/host/submit.py only parses, calls this and prints); a cluster your settings reach over SSH is submitted
to through cluster_train/host/remote, as from its login node (cluster_train/host/api/over_ssh.py).

    job = Job("ci-slurm", "n1_gpu1", "demo", overrides={"trainer.max_epochs": 1})
    problems = job.check()          # [] when it would submit; else every problem, in the command line's words
    script = job.dry_run().script   # the job script, byte for byte what `run-cluster ... --dry-run` shows
    run = job.submit()              # queued: a Run of its run directory
"""
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from cluster_train.host import runs
from cluster_train.host.api import over_ssh
from cluster_train.host.api.over_ssh import refuse_over_ssh
from cluster_train.host.api.budgets import budget_lines, within_budget
from cluster_train.host.api.errors import ClusterTrainError
from cluster_train.host.api.run import Run
from cluster_train.host.api.sweep import Sweep, sweep_of
from cluster_train.host.api.overrides import Overrides, given_overrides
from cluster_train.host.api.values import After, DryRun, checked_number
from cluster_train.host.jobs import user_code
from cluster_train.host.jobs.build import Request, Site, Submission, build
from cluster_train.host.runs import budget
from cluster_train.host.runs.after import build_after
from cluster_train.host.runs.queue import Plan, one_run, start_estimate
from cluster_train.host.runs.rerun import rerun_submission

if TYPE_CHECKING:
    from cluster_train.host.api.study import Study, StudyProgress

RACE_TIMEOUT_S = 24 * 3600.0  # how long a race of two profiles waits for either to start


class Job:
    """One training job: a cluster (a name in clusters/ or a cluster YAML path), a profile of it, an experiment (a
    name in experiments/ or a YAML path; None: the profile's own, else the default) and overrides (a mapping of
    dotted keys to values, or "KEY=VALUE" strings as --set takes them). `command`: your own code to run in the image
    instead of a registered task (as after `run-cluster ... --`). The rest are the command line's options of the
    same names: `flavor` (--flavor: the image flavor instead of the profile's), `run_id` (--run-id: the run's
    directory name instead of a new id), `dev` (--dev: your working directory bound into the container instead of a
    snapshot of it), `stale_image_ok` (--stale-image-ok: train with an image built from other code than this
    checkout) and `strict_budget` (--strict-budget: refuse a job that may pass your GPU-hour budget, rather than a
    BudgetWarning). Nothing is read or checked until a method is called."""

    def __init__(self, cluster: str, profile: str, experiment: Optional[str] = None, *, overrides: Overrides = (),
                 command: Optional[Sequence[str]] = None, flavor: Optional[str] = None, run_id: Optional[str] = None,
                 dev: bool = False, stale_image_ok: bool = False, strict_budget: bool = False) -> None:
        self.cluster = cluster
        self.profile = profile
        self.experiment = experiment
        self.overrides = given_overrides(overrides)
        self.command = list(command) if command else None
        self.flavor = flavor
        self.run_id = run_id
        self.dev = dev
        self.stale_image_ok = stale_image_ok
        self.strict_budget = strict_budget

    def __repr__(self) -> str:
        return f"Job({self.cluster!r}, {self.profile!r}, {self.experiment!r}, overrides={self.overrides!r})"

    def check(self) -> List[str]:
        """Every problem that would refuse this job, one line each in the command line's words; [] when it would
        submit. Writes nothing. On a cluster over SSH: what can be checked here (the config, this machine's image);
        its login node checks the rest when the job is submitted."""
        try:
            site = Site.load(self.cluster)
            if site.user.get("ssh"):
                over_ssh.checked(self, site, dry_run=False)
            else:
                sub = build_after(site, self._request(self.profile, dry_run=False))
                sub.discard()
                if self.strict_budget:  # the refusal submit() would raise; without strict, submit only warns
                    budget.check([sub.job], strict=True)
        except ClusterTrainError as err:
            return err.problems
        return []

    def dry_run(self, sweep: Optional[Mapping[str, Sequence[Any]]] = None,
                max_parallel: Optional[int] = None, *, after: After = ()) -> DryRun:
        """The script, resolved config, summary and warnings of a submission, with nothing written or queued (the
        code snapshot taken to check your code is dropped again). With `sweep` (as Job.sweep takes it): the job
        array's script (a sweep split into several arrays: each under the line the command line heads it with) and
        the first element's config; `max_parallel`: as Job.sweep takes it. `after`: as submit takes it, checked
        alike. Raises ClusterTrainError on bad input."""
        site = Site.load(self.cluster)
        refuse_mixed(sweep is not None, max_parallel, rerun=False, first_to_start=False, command=bool(self.command),
                     after=bool(after))
        if sweep is not None:
            return self._sweep_dry_run(site, sweep, max_parallel)
        if site.user.get("ssh"):
            return over_ssh.dry_run(self, site, after)
        return dry_run_of(build_after(site, self._request(self.profile, True, after)), self.strict_budget)

    def _sweep_dry_run(self, site: Site, axes: Mapping[str, Sequence[Any]], max_parallel: Optional[int]) -> DryRun:
        """Job.dry_run(sweep=...): every element built and checked, the array's script, nothing written."""
        from cluster_train.host.runs.sweep import dry_run_text, plan_of, prepare_sweep
        from cluster_train.host.runs.sweep_values import axes_given

        refuse_over_ssh(site, "a sweep from the API")
        swept = prepare_sweep(site, self._request(self.profile, True), [], None, max_parallel, axes_given(axes))
        plan = plan_of(swept)
        plan.discard()
        said, warned = budget_lines(plan.jobs, self.strict_budget)
        script = swept.scripts()[0] if len(swept.chunks) == 1 else dry_run_text(swept)
        summary = "\n".join([with_estimate(plan.summary, plan.start_estimate()), *said])
        return DryRun(script, user_code.recorded_config(swept.elements[0].run), summary,
                      list(dict.fromkeys([*plan.warnings, *warned])))

    def submit(self, *, after: After = ()) -> Run:
        """Check, write the run directory and queue the job; its Run. `after`: runs (Run, run id or directory)
        this one starts after. Raises ClusterTrainError, with nothing queued or written, on any bad input."""
        site = Site.load(self.cluster)
        if site.user.get("ssh"):
            return over_ssh.submit(self, site, after)
        plan = one_run(self._submission(site, dry_run=False, after=after))
        within_budget(plan, self.strict_budget)
        plan.queue()
        return Run(plan.run_dirs[0])

    def sweep(self, axes: Mapping[str, Sequence[Any]], max_parallel: Optional[int] = None, *,
              after: After = ()) -> Sweep:
        """One run per combination of the values of `axes` ({dotted key: [values]}, the last key varying fastest),
        queued as one job array with at most `max_parallel` at once (a whole number; None: the scheduler's own cap);
        every element is checked before any is queued. `after`: as submit takes it. Its Sweep."""
        from cluster_train.host.runs.sweep_values import axes_given

        site = Site.load(self.cluster)
        refuse_over_ssh(site, "a sweep from the API")
        plan = self._plan(site, dry_run=False, axes=axes_given(axes), max_parallel=max_parallel, after=after)
        within_budget(plan, self.strict_budget)
        plan.queue()
        return sweep_of(plan.run_dirs[0].parent, plan.run_dirs)

    def search(self, search: Union[str, Path, Mapping[str, Any]], max_parallel: Optional[int] = None, *,
               wait: bool = True, timeout_s: float = RACE_TIMEOUT_S,
               progress: Optional[Callable[["StudyProgress"], None]] = None) -> "Study":
        """An Optuna study over the space of `search` (a search file's path, or its mapping: space, objective, trials,
        sampler, pruner), its trials queued as job arrays of at most `max_parallel`; checked whole before anything
        is queued, then driven here until it ends (`wait`; at most `timeout_s` seconds, more than 0) or in the
        background. `progress`: called with a StudyProgress at each event of the driver (Study.resume's)."""
        from cluster_train.host.api.study import start

        return start(self, search, max_parallel, wait, timeout_s, progress)

    @staticmethod
    def rerun_of(run: Union[Run, str, Path], overrides: Overrides = (), *, run_id: Optional[str] = None,
                 stale_image_ok: bool = False, strict_budget: bool = False) -> "Rerun":
        """A rerun of `run` (a Run, run id or directory), to check, dry-run or submit as a Job; `overrides`, `run_id`,
        `stale_image_ok` and `strict_budget` as Rerun takes them."""
        return Rerun(run, overrides, run_id=run_id, stale_image_ok=stale_image_ok, strict_budget=strict_budget)

    def _request(self, profile: str, dry_run: bool, after: After = (), **recorded: Any) -> Request:
        """The job builder's Request for this job on `profile` (a rerun's recorded values over it)."""
        asked = dict(overrides=self.overrides, run_id=self.run_id, flavor=self.flavor, dry_run=dry_run,
                     stale_image_ok=self.stale_image_ok, command=self.command, dev=self.dev,
                     after=after_dirs(after))
        return Request(profile, self.experiment, **{**asked, **recorded})

    def _submission(self, site: Site, dry_run: bool, after: After = ()) -> Submission:
        """This job built and checked on `site`, nothing written (the command line shows it, then queues it)."""
        return build_after(site, self._request(self.profile, dry_run, after))

    def _plan(self, site: Optional[Site] = None, *, dry_run: bool, sweeps: Sequence[str] = (),
             sweep_file: Optional[str] = None, axes: Optional[List[Tuple[str, List[str]]]] = None,
             max_parallel: Optional[int] = None, first_to_start: Optional[Sequence[str]] = None,
             timeout_s: float = RACE_TIMEOUT_S, after: After = ()) -> Plan:
        """What the command line shows and queues: one run, a sweep (`sweeps` as --sweep gives them, a
        `sweep_file`, or the API's `axes`), or a race of the two profiles of `first_to_start`; all checked."""
        swept = bool(sweeps or sweep_file or axes)
        refuse_mixed(swept, max_parallel, rerun=False, first_to_start=bool(first_to_start),
                     command=bool(self.command), after=bool(after))
        site = site or Site.load(self.cluster)
        if first_to_start:
            from cluster_train.host.runs.race import race_plan

            refuse_over_ssh(site, "--first-to-start")
            subs = [build(site, self._request(name, dry_run, after, run_id=None)) for name in first_to_start]
            return race_plan(subs, list(first_to_start), timeout_s)
        if swept:
            from cluster_train.host.runs.sweep import sweep_plan

            return sweep_plan(site, self._request(self.profile, dry_run, after), list(sweeps), sweep_file,
                              max_parallel, axes)
        return one_run(self._submission(site, dry_run, after))


class Rerun:
    """A new run of a recorded one (a Run, run id or directory) on its own cluster and profile, with its config,
    image digest, code and data image; `overrides` apply on top and are recorded. check(), dry_run() and submit()
    as a Job's (what `run-cluster --rerun RUN [--dry-run]` does); its cluster, profile and image are the run's, so
    it takes none. `run_id`, `stale_image_ok` and `strict_budget`: as Job takes them. Nothing is read until a method
    is called."""

    def __init__(self, run: Union[Run, str, Path], overrides: Overrides = (), *, run_id: Optional[str] = None,
                 stale_image_ok: bool = False, strict_budget: bool = False) -> None:
        self.run = run_path(run)
        self.overrides = given_overrides(overrides)
        self.run_id = run_id
        self.stale_image_ok = stale_image_ok
        self.strict_budget = strict_budget  # as Job's: the rerun refused where it may pass your GPU-hour budget

    def __repr__(self) -> str:
        return f"Job.rerun_of({str(self.run)!r}, overrides={self.overrides!r})"

    def check(self) -> List[str]:
        """Every problem that would refuse the rerun, in the command line's words; [] when it would submit."""
        try:
            sub = self._submission(dry_run=False)
            sub.discard()
            if self.strict_budget:
                budget.check([sub.job], strict=True)
        except ClusterTrainError as err:
            return err.problems
        return []

    def dry_run(self, *, after: After = ()) -> DryRun:
        """The rerun's script, config, summary and warnings, nothing written or queued; `after`: as submit takes
        it, checked alike."""
        return dry_run_of(self._submission(dry_run=True, after=after), self.strict_budget)

    def submit(self, *, after: After = ()) -> Run:
        """Check, write the new run directory and queue it (after the runs of `after`); its Run."""
        plan = one_run(self._submission(dry_run=False, after=after))
        within_budget(plan, self.strict_budget)
        plan.queue()
        return Run(plan.run_dirs[0])

    def _submission(self, dry_run: bool, after: After = ()) -> Submission:
        """The rerun built and checked, nothing written (the command line shows it, then queues it)."""
        return rerun_submission(self.run, self.overrides, self.run_id, dry_run, self.stale_image_ok,
                                after=after_dirs(after))


def rerun(run: Union[Run, str, Path], overrides: Overrides = (), *, run_id: Optional[str] = None,
          stale_image_ok: bool = False, strict_budget: bool = False, after: After = ()) -> Run:
    """Submit a run again on its own cluster and profile, with its config and image digest; `overrides` apply on
    top and are recorded; `run_id`, `stale_image_ok` and `strict_budget` as Job takes them; `after`: runs it starts
    after (as Job.submit takes them). Its new Run (Job.rerun_of(run, ...).submit())."""
    return Rerun(run, overrides, run_id=run_id, stale_image_ok=stale_image_ok,
                 strict_budget=strict_budget).submit(after=after)


def dry_run_of(sub: Submission, strict_budget: bool = False) -> DryRun:
    """A submission built for a dry run as the API returns it; what it took to check the code is dropped again. The
    budget's lines as the command line's dry run shows them: after the summary, its warnings among the warnings;
    with `strict_budget`, refused."""
    sub.discard()
    said, warned = budget_lines([sub.job], strict_budget)
    summary = "\n".join([with_estimate(sub.summary, start_estimate(sub.job, sub.script)), *said])
    return DryRun(sub.script, user_code.recorded_config(sub.run), summary,
                  list(dict.fromkeys([*sub.warnings, *warned])))


def with_estimate(summary: str, estimate: str) -> str:
    """A dry run's summary ends with the scheduler's start estimate, as the command line shows it."""
    return f"{summary}\n{estimate}" if estimate else summary


def refuse_mixed(swept: bool, max_parallel: Optional[int], *, rerun: bool, first_to_start: bool,
                 command: bool, after: bool = False) -> None:
    """Choices that cannot go together: a sweep, a rerun, a race of two profiles, your own command, a wait; and
    `max_parallel` of the API's kind (a whole number), so a wrong kind is refused here, not deep inside."""
    checked_number("max_parallel", max_parallel, whole=True, none_ok=True)
    if (swept or max_parallel is not None) and (rerun or first_to_start):
        raise ClusterTrainError("--sweep starts new runs; --rerun and --first-to-start take none")
    if max_parallel is not None and not swept:
        raise ClusterTrainError("--max-parallel caps a sweep; add --sweep KEY=V1,V2,...")
    if command and (rerun or first_to_start):
        raise ClusterTrainError("a command after -- starts a new run; --rerun and --first-to-start take none")
    if after and (swept or first_to_start):
        raise ClusterTrainError("--after holds one run until others complete; a sweep or --first-to-start takes none "
                                "(submit it once the runs have completed)")


def run_path(run: Union[Run, str, Path]) -> Path:
    return Path(run.path) if isinstance(run, Run) else Path(run)


def after_dirs(after: After) -> List[Path]:
    """The runs a job starts after, as their directories (a run id is looked up in the run roots)."""
    return [run_path(a) if not isinstance(a, str) else runs.find(a) for a in after]
