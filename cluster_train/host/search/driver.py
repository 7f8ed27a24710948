"""The driver of a study: asks Optuna for trials, queues them as job arrays (a batch fills the free places of
--max-parallel), reads each running trial's metrics.csv after every validation, reports it to the study and cancels a
trial the pruner stops, and tells the study each trial's end. It can be killed at any moment and started again
(`run-cluster resume runs/<study>`, from any machine that sees the study's directory): everything it knows is in the
storage and the run directories.

Pruning is decided here, from metrics.csv on the shared file system, not inside the job: compute nodes often cannot
reach the login node's network (nor a database on it), and a SQLite file written from many nodes over NFS corrupts;
the job needs nothing new in the image, and the driver is the one writer of the storage."""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.images.locations import run_image
from cluster_train.host.jobs.build import Request, Site
from cluster_train.host.runs import failures
from cluster_train.host.runs.ending import cancel_run, describe, has_ended, run_state
from cluster_train.host.runs.sweep import prepare_listed, queue_sweep
from cluster_train.host.schedulers import State, adapter
from cluster_train.host.search import objective, record as rec
from cluster_train.host.search.optuna_study import distributions, median_at, open_study, optuna_module
from cluster_train.host.search.spec import as_override, read_spec

POLL_S = 2.0


@dataclass(frozen=True)
class StudyProgress:
    """What a study's progress callback gets at each event of its driver (Job.search(progress=...) and
    Study.resume(progress=...); the command line prints its `event`): `event`, what just happened in the command
    line's words ("trial 3 finished: val/acc 0.41 (runs/<study>/batch-1/e0)"); `trials` asked for; `finished`
    (completed, pruned or failed), of them `pruned` and `failed`; `running` (queued or running); `best`: the best
    completed trial's objective so far (None before one); `final`: the driver's last event (the study has ended)."""

    event: str
    trials: int
    finished: int
    pruned: int
    failed: int
    running: int
    best: Optional[float]
    final: bool = False


Report = Callable[[StudyProgress], None]


def unwatched(_: StudyProgress) -> None:
    """The progress callback of whoever does not watch: the library never prints."""


class Driver:
    def __init__(self, study_dir: Path, report: Report = unwatched, poll_s: float = POLL_S):
        # made absolute here: a study named by a relative path queues trials whose run directories Apptainer binds
        self.dir, self.report, self.poll_s = Path(study_dir).resolve(), report, poll_s
        self.record = rec.read_record(self.dir)
        self.spec = read_spec(self.record["spec"], "study.json")
        self.optuna = optuna_module()
        self.study = open_study(self.record)
        self.site = Site.load(self.record["cluster_file"])
        self.distributions = distributions(self.optuna, self.spec)
        self.per_validation = self.spec.metric in objective.LOGGED.get(self.record["task"], {}).get("metrics.csv", ())
        self.max_epochs = self.record["max_epochs"]
        self.recover()

    def recover(self) -> None:
        """A trial queued by a driver that died before noting its run directory: found in its batch's sweep.json."""
        batches = {n: b["dir"] for b in self.record["batches"] for n in b["trials"]}
        for t in self.running():
            sweep_json = self.dir / batches.get(t.number, "-") / "sweep.json"
            if t.user_attrs.get("run_dir") or not sweep_json.is_file():
                continue
            element = rec.read_json(sweep_json)["elements"][batches_index(self.record, t.number)]
            trial = self.optuna.trial.Trial(self.study, t._trial_id)
            trial.set_user_attr("run_dir", element["run_dir"])
            trial.set_user_attr("job_id", element["job_id"])

    def run(self, timeout_s: float) -> bool:
        """Drive until every trial has finished (True) or `timeout_s` has passed (False)."""
        deadline = time.monotonic() + timeout_s
        while not (self.dir / rec.CANCELLED).exists():
            self.follow_running()
            if self.finished() >= self.spec.trials and not self.running():
                self.snapshot()
                return True
            self.queue_more()
            self.snapshot()
            if time.monotonic() > deadline:
                return False
            time.sleep(self.poll_s)
        self.say(f"study {self.dir.name} was cancelled; its driver stops")
        return False

    def say(self, event: str, final: bool = False) -> None:
        """One event to the progress callback, with the study's counts as they are now."""
        count = {state: len(self.trials(state)) for state in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")}
        best = self.study.best_value if count["COMPLETE"] else None
        self.report(StudyProgress(event, self.spec.trials, count["COMPLETE"] + count["PRUNED"] + count["FAIL"],
                                  count["PRUNED"], count["FAIL"], count["RUNNING"], best, final))

    def trials(self, *states: str):
        return [t for t in self.study.get_trials(deepcopy=False) if not states or t.state.name in states]

    def running(self):
        return self.trials("RUNNING")

    def finished(self) -> int:
        return len(self.trials(*rec.FINISHED))

    def follow_running(self) -> None:
        for trial in self.running():
            if trial.user_attrs.get("run_dir"):
                self.follow(trial)

    def follow(self, frozen) -> None:
        """Report the trial's new validations; prune it, or tell the study how it ended."""
        run_dir, job_id = Path(frozen.user_attrs["run_dir"]), frozen.user_attrs["job_id"]
        trial = self.optuna.trial.Trial(self.study, frozen._trial_id)
        state = run_state(adapter(self.record["scheduler"]), job_id, run_dir)
        ended = has_ended(state)
        new = [(step, value) for step, value in objective.intermediate(run_dir, self.spec.metric, self.max_epochs,
                                                                       ended)
               if step not in frozen.intermediate_values] if self.per_validation else []
        for step, value in new:
            trial.report(value, step)
        if not ended:
            if new and trial.should_prune():
                self.prune(frozen.number, trial, run_dir, *new[-1])
            return
        completed = state["state"] == State.COMPLETED
        value = objective.final(run_dir, self.spec.metric, self.max_epochs) if completed else None
        if value is None:
            ended = (f"{describe(state)}: {failures.of_failed(run_dir, state['state'].value)}".rstrip(": ")
                     if not completed else f"no {self.spec.metric} in its results")
            trial.set_user_attr("ended", ended)
            self.study.tell(frozen.number, state=self.optuna.trial.TrialState.FAIL)
            self.say(f"trial {frozen.number} failed: {ended} ({run_dir})")
        else:
            self.study.tell(frozen.number, value)
            self.say(f"trial {frozen.number} finished: {self.spec.metric} {value:.6g} ({run_dir})")

    def prune(self, number: int, trial, run_dir: Path, step: int, value: float) -> None:
        """Cancel the trial's job (its GPUs free at once) and record it PRUNED, with its value against the median."""
        median, of = median_at(self.optuna, self.study, step)
        pruned = {"epoch": step, "value": value, "median": median, "of_trials": of, "study": self.record["study_id"],
                  "trial": number, "metric": self.spec.metric}
        rec.write_json(run_dir / "pruned.json", pruned)
        trial.set_user_attr("pruned", pruned)
        cancel_run(runs.read_manifest(run_dir), run_dir)
        self.study.tell(number, state=self.optuna.trial.TrialState.PRUNED)
        self.say(f"trial {number} pruned after epoch {step}: {self.spec.metric} {value:.6g}, median of "
                 f"{of} finished trials {median:.6g} ({run_dir})")

    def queue_more(self) -> None:
        """Fill the free places: trials asked but never queued (a driver stopped in between) first, then new ones."""
        running = self.running()
        unqueued = [t for t in running if not t.user_attrs.get("run_dir")]
        room = self.record["max_parallel"] - (len(running) - len(unqueued))
        new = max(0, min(room - len(unqueued), self.spec.trials - self.finished() - len(running)))
        batch = unqueued[:room] + [self.study.ask(self.distributions) for _ in range(new)]
        if batch:
            self.queue_batch(batch)

    def queue_batch(self, trials) -> None:
        number = len(self.record["batches"])
        name = f"batch-{number}"
        self.record["batches"].append({"dir": name, "trials": [t.number for t in trials]})
        rec.write_json(self.dir / rec.STUDY, self.record)  # before queuing: a restarted driver finds what it did
        settings = [dict(t.params) for t in trials]  # the sampled values as Optuna typed them
        try:
            sweep = prepare_listed(self.site, self.request(), settings, len(trials), f"{self.record['study_id']}-b"
                                   f"{number}", self.dir / name, named="trial")
        except UserError as err:  # the space was checked whole: what refuses a batch now is the site (an image
            # rebuilt, data moved): the driver stops, and its asked trials wait for `resume`, with their values
            raise UserError(f"the study's trials cannot be queued: {err.lines[0]}; fix that, then continue it: "
                            f"run-cluster resume {self.dir}") from None
        queue_sweep(sweep, study={"study_id": self.record["study_id"], "trials": [t.number for t in trials]})
        for t, sub, setting in zip(trials, sweep.elements, settings):
            manifest = runs.read_manifest(Path(sub.job.work.run_dir))
            trial = self.optuna.trial.Trial(self.study, t._trial_id)
            trial.set_user_attr("run_dir", sub.job.work.run_dir)
            trial.set_user_attr("job_id", manifest.job_id)
            self.say(f"trial {t.number} queued: {rec.shown_params(setting)} "
                     f"({sub.job.work.run_dir})")
        self.record.setdefault("image_of", sweep.elements[0].job.work.run_dir)

    def request(self) -> Request:
        """Each trial's Request: the study's experiment and overrides, on the image the first trial ran (a study
        resumed after a rebuild keeps its image)."""
        image, pulled = None, []
        if self.record.get("image_of"):
            image = run_image(runs.read_manifest(Path(self.record["image_of"])), "the study's image",
                              self.site.image_store, pulled)
        for line in pulled:
            self.say(line)
        r = self.record
        return Request(r["profile"], r["experiment"], overrides=list(r["overrides"]), flavor=r.get("flavor"),
                       image=image, stale_image_ok=r.get("stale_image_ok", False), dev=r.get("dev", False))

    def snapshot(self) -> None:
        """trials.json: every trial as `status`, `runs` and the report show it."""
        rec.write_json(self.dir / rec.STUDY, self.record)
        rec.write_json(self.dir / rec.TRIALS, [trial_row(t) for t in self.trials()])


def batches_index(record: Dict, number: int) -> int:
    """The trial's place in its last batch (its element's index in that batch's array)."""
    return next(b["trials"].index(number) for b in reversed(record["batches"]) if number in b["trials"])


def trial_row(t) -> Dict:
    return {"number": t.number, "state": t.state.name, "params": {k: as_override(v) for k, v in t.params.items()},
            "value": t.value if t.state.name == "COMPLETE" else None, "run_dir": t.user_attrs.get("run_dir"),
            "job_id": t.user_attrs.get("job_id"), "steps": {str(k): v for k, v in t.intermediate_values.items()},
            "pruned": t.user_attrs.get("pruned"), "ended": t.user_attrs.get("ended")}


def drive(study_dir: Path, timeout_s: float, report: Report = unwatched, poll_s: Optional[float] = None) -> bool:
    """Drive the study under its lock (one driver at a time), each event to `report`; True once every trial has
    finished (its last event: the study's summary line)."""
    with rec.driver_lock(study_dir):
        driver = Driver(study_dir, report, poll_s or POLL_S)
        done = driver.run(timeout_s)
    if done:
        driver.say(summary_line(driver.dir), final=True)
    return done


def summary_line(study_dir: Path) -> str:
    p = rec.progress(study_dir)
    best = p["best"]
    shown = (f"best {p['metric']} {best['value']:.6g}: trial {best['number']} "
             f"({rec.shown_params(best['params'])}) {best['run_dir']}" if best
             else "no trial completed")
    return (f"study {Path(study_dir).name}: {p['finished']} of {p['trials']} trials finished ({p['pruned']} pruned, "
            f"{p['failed']} failed); {shown}")

