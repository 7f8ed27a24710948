"""--first-to-start's words (the one-cluster form and CLUSTER:PROFILE entries) and their refusals, each entry's refusal
naming it before anything is queued, and the race across clusters' choice of winner (cluster_train/host/api/race.py,
cluster_train/host/remote/race.py); the race itself on real clusters: tests/cluster/test_race_clusters.py."""
from pathlib import Path
from typing import List

import pytest

from cluster_train.shared.errors import UserError
from cluster_train.host import submit
from cluster_train.host.api import race
from cluster_train.host.remote import race as racing


def words(*argv: str):
    args = submit.parser().parse_intermixed_args(list(argv))
    race.sort_words(args)
    return args


def test_the_one_cluster_form_keeps_its_words_where_they_were():
    args = words("ci-slurm", "--first-to-start", "a", "b", "demo")
    assert (args.cluster, args.profile, args.experiment, args.first_to_start) == ("ci-slurm", "demo", None, ["a", "b"])
    args = words("ci-slurm", "demo", "--first-to-start", "a", "b", "--set", "x=1")
    assert (args.cluster, args.profile, args.first_to_start, args.overrides) == ("ci-slurm", "demo", ["a", "b"],
                                                                                  ["x=1"])
    assert not race.across(args)


def test_cluster_profile_entries_across_clusters():
    args = words("--first-to-start", "gilbreth:single_node_4gpu", "torch-hpc:l40s_2x4", "/c/my.yaml:p", "smart_motion")
    assert race.across(args) and args.first_to_start == ["gilbreth:single_node_4gpu", "torch-hpc:l40s_2x4",
                                                         "/c/my.yaml:p"]
    assert race.experiment_of([args.cluster, args.profile, args.experiment]) == "smart_motion"
    assert race.entries_of(args.first_to_start) == [race.Entry("gilbreth", "single_node_4gpu"),
                                                    race.Entry("torch-hpc", "l40s_2x4"), race.Entry("/c/my.yaml", "p")]
    assert race.experiment_of([None, None, None]) is None  # each profile's own


@pytest.mark.parametrize("argv, said", [
    (["--first-to-start", "a", "ci-lsf:b"], "mixes a PROFILE ('a') with CLUSTER:PROFILE entries"),
    (["--first-to-start", "ci-slurm:a", "demo", "ci-lsf:b"], "mixes a PROFILE ('demo') with CLUSTER:PROFILE"),
    (["ci-slurm", "--first-to-start", "a"], "--first-to-start a races nothing; name two profiles of CLUSTER"),
    (["ci-slurm", "--first-to-start", "a", "b", "demo", "x", "y"], "unrecognized arguments: y"),
])
def test_words_that_make_no_race_are_refused_in_one_line(argv, said):
    with pytest.raises(UserError) as err:
        words(*argv)
    assert said in str(err.value) and len(err.value.lines) == 1, err.value


@pytest.mark.parametrize("entries, said", [
    (["ci-slurm:a"], "--first-to-start ci-slurm:a races nothing; name two or more CLUSTER:PROFILE entries"),
    (["ci-slurm:a", "ci-slurm:a"], "names ci-slurm:a twice; name each CLUSTER:PROFILE once"),
    (["ci-slurm:a", ":b"], "--first-to-start ':b': name a cluster before the colon"),
    (["ci-slurm:a", "ci-lsf:"], "--first-to-start 'ci-lsf:': name a profile after the colon"),
])
def test_bad_entries_are_refused_naming_the_entry(entries, said):
    with pytest.raises(UserError) as err:
        race.entries_of(entries)
    assert said in str(err.value), err.value


def test_an_experiment_beside_a_cluster_word_is_refused():
    with pytest.raises(UserError, match="give only the EXPERIMENT beside them, not 'local demo'"):
        race.experiment_of(["local", "demo", None])


def test_every_refused_entry_is_named_before_anything_is_queued(tmp_path, monkeypatch):
    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))
    with pytest.raises(UserError) as err:
        race.race_plan_across(["local:cpu_1proc", "nowhere:x", "local:nope"], "demo", dry_run=False, timeout_s=1)
    # local:cpu_1proc is refused too where this checkout's image is older than its code (make test-fast builds none)
    lines = [line for line in err.value.lines if not line.startswith("--first-to-start local:cpu_1proc: the cpu image")]
    assert len(lines) == 2 and lines[0].startswith("--first-to-start nowhere:x: unknown cluster 'nowhere'"), lines
    assert lines[1].startswith("--first-to-start local:nope: unknown profile"), lines
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # nothing written


def test_a_scheduler_whose_commands_are_missing_is_refused_before_anything_is_queued(tmp_path, monkeypatch):
    """bsub not on PATH (this machine has Slurm's commands, not LSF's): ci-lsf's entry is refused and nothing is
    queued, where the race once queued ci-slurm's job and then cancelled it."""
    import shutil

    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))
    assert shutil.which("sbatch") and not shutil.which("bsub")
    with pytest.raises(UserError) as err:
        race.race_plan_across(["ci-slurm:n1_gpu1", "ci-lsf:one_gpu"], "demo", dry_run=False, stale_image_ok=True,
                              timeout_s=1)
    lines = [line for line in err.value.lines if " image " not in line]  # a checkout with no image refuses that too
    assert lines == ["--first-to-start ci-lsf:one_gpu: bsub, bjobs, bkill, bhist not on PATH here, so no lsf job can "
                     "be queued; run the race where lsf's commands are, or load the module that brings them"], lines
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # nothing written


class Fake:
    """A contender whose scheduler starts its job once polled `starts_after` times (None: never)."""

    def __init__(self, name: str, starts_after, log: List[str], fails: bool = False):
        self.polls, self.starts_after, self.log, self.fails = 0, starts_after, log, fails
        self.outcome = None
        self.made = racing.Contender(
            f"{name}:p", name, f"run-{name}", Path(name), "", queue=self.queue, started=self.started,
            cancel=lambda job_id: log.append(f"cancel {job_id}"), record=self.record)

    def queue(self):
        if self.fails:
            raise UserError("refused")
        return f"job-{self.made.cluster}", f"queued {self.made.cluster}"

    def started(self, _):
        self.polls += 1
        return self.starts_after is not None and self.polls > self.starts_after

    def record(self, outcome):
        self.outcome = outcome


def test_the_first_listed_of_those_started_wins_and_the_rest_are_cancelled():
    log: List[str] = []
    fakes = [Fake("a", 1, log), Fake("b", 1, log), Fake("c", None, log)]  # a and b start at the same poll
    said = racing.race_across([f.made for f in fakes], timeout_s=30, poll_s=0.01)
    assert log == ["cancel job-b", "cancel job-c"]
    assert said[-1].startswith("a:p started first on a (job job-a, run run-a, after 0 s); cancelled b:p (job job-b")
    assert [f.outcome["won"] for f in fakes] == [True, False, False]
    assert all(f.outcome["winner_cluster"] == "a" and len(f.outcome["runs"]) == 3 for f in fakes)


def test_a_refused_submission_cancels_those_queued_and_a_timeout_leaves_all_queued():
    log: List[str] = []
    with pytest.raises(UserError, match="refused"):
        racing.race_across([Fake("a", 0, log).made, Fake("b", 0, log, fails=True).made], timeout_s=30)
    assert log == ["cancel job-a"]  # nothing is left allocated
    log.clear()
    with pytest.raises(UserError, match=r"none of a:p \(job job-a\), b:p \(job job-b\) started within 0 s; all are "):
        racing.race_across([Fake("a", None, log).made, Fake("b", None, log).made], timeout_s=0.05, poll_s=0.01)
    assert log == []


def test_an_interrupted_race_cancels_every_job():
    log: List[str] = []
    fakes = [Fake("a", None, log), Fake("b", None, log)]

    def interrupted(_):
        raise KeyboardInterrupt

    fakes[1].made.started = interrupted
    with pytest.raises(UserError, match=r"interrupted: cancelled a:p \(job job-a\), b:p \(job job-b\)"):
        racing.race_across([f.made for f in fakes], timeout_s=30, poll_s=0.01)
    assert log == ["cancel job-a", "cancel job-b"]
