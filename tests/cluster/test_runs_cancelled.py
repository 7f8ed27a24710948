"""No cancelled run stuck (issue 24), on the real test Slurm cluster and the LSF stand-in: a run cancelled between two
requeues, before it started, or (a sweep) just after its elements started, ends CANCELLED in `status`, which names
the cancel and not a rank; `logs --follow` returns; `resume` continues it. Seen while Slurm remembers the jobs (by
tests/cancel_scenarios.py, which cancels them as the session starts), and checked again after MinJobAge, when only
the runs' own records and sacct do, at the session's end. On LSF, the stand-in's CLEAN_PERIOD is a few seconds.
Every segment is closed (a batch shell SIGKILLed mid-save gets its end from the accounting) and says what the run's
line says (`cancelling` while the cancel ends it); the resumed runs' queue waits are the scheduler's own, and a run
queued --after another shows its wait on it apart (issue 55 items 3, 5, 14).
(The decisions themselves, case by case: tests/host/test_end_states.py.)"""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from cancel_scenarios import ELEMENTS, SINGLE_RUNS, observe
from conftest import ROOT, job_logs, run_cluster

from cluster_train.host.runs import segments

pytestmark = [pytest.mark.image, pytest.mark.slurm]
BY_RUN_CLUSTER = "cause: cancelled by bin/run-cluster cancel at 20"
CAUSES = {"requeued": BY_RUN_CLUSTER, "unstarted": BY_RUN_CLUSTER, "sweep/e0": BY_RUN_CLUSTER,
          "sweep/e1": BY_RUN_CLUSTER, "scancelled": "cause: cancelled outside run-cluster (sacct: CANCELLED by uid 0"}


def cancelled(base: Path, driver: subprocess.Popen) -> dict:
    """cancelled.json of the driver (tests/cancel_scenarios.py), once it has cancelled and observed every run."""
    try:
        driver.wait(timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the cancel scenarios did not finish in 300 s: {(base / 'driver.log').read_text()[-3000:]}")
    assert driver.returncode == 0, (base / "driver.log").read_text()[-4000:]
    return json.loads((base / "cancelled.json").read_text())


def assert_cancelled(seen: dict, job_id: str, cause: str) -> None:
    """status said CANCELLED and named the cancel; logs --follow returned and said so; a second cancel changed
    nothing; resume would continue the run."""
    status, follow, again, resume = (seen[name] for name in ("status", "follow", "again", "resume"))
    assert status["rc"] == 0 and f"job {job_id} CANCELLED" in status["out"], status
    assert cause in status["out"] and "died" not in status["out"], status["out"]
    # every segment closed: one the scheduler SIGKILLed mid-save has its end from the accounting (issue 55 item 3)
    assert "running" not in status["out"] and "RUNNING" not in status["out"], status["out"]
    assert follow["rc"] == 0 and f"job {job_id} CANCELLED (" in follow["err"], follow
    assert again["rc"] == 0 and "has ended: CANCELLED" in again["out"], again
    assert resume["rc"] == 0, resume  # the issue's `resume runs/<sweep>/e0` was refused as PENDING or UNKNOWN


def assert_as_cancelled(runs: Path) -> None:
    """Each scenario as it was meant: the requeued run saved before it was cancelled, the unstarted ones never ran,
    the sweep's batch shells were cancelled mid-save: killed after KillWait before they recorded their end (which
    `status` then recorded from sacct: CANCELLED, the batch step's SIGKILL, its end time), or (on a loaded machine,
    where Slurm's SIGKILL of the steps reaches the shell's trap before the shell's own) recording TERMINATED."""
    assert [s.how for s in segments.read(runs / "requeued")] == ["REQUEUED"]
    assert segments.read(runs / "unstarted") == segments.read(runs / "scancelled") == []
    for element in ELEMENTS:
        found = segments.read(runs / element)
        assert len(found) == 1 and (found[0].how == "TERMINATED" or (
            found[0].how == "CANCELLED" and found[0].ended_by.startswith("sacct") and found[0].end
            and found[0].exit_code == 137)), (element, found, job_logs(runs / element)[-2000:])


def test_each_way_to_cancel_a_run_ends_it_cancelled(cancelled_runs):
    """As the driver saw each run once its job had left the queue, while Slurm still knew it."""
    base, driver = cancelled_runs
    record = cancelled(base, driver)
    assert_as_cancelled(base / "runs")
    assert set(record["scontrol"].values()) == {"CANCELLED"}, record["scontrol"]  # remembered when observed
    for name, job_id in record["jobs"].items():
        assert_cancelled(record["seen"][name], job_id, CAUSES[name])
    table = record["seen"]["sweep"]["status"]
    assert len(re.findall(r"^e[01] .* CANCELLED ", table, re.M)) == 2, table
    assert re.search(rf"job {record['jobs']['sweep/e0']} cancelling\b", record["cancelling"]), record["cancelling"]
    # one state: its running segment is being cancelled too, not RUNNING (issue 55 item 14)
    assert "RUNNING" not in record["cancelling"] and "-> cancelling" in record["cancelling"], record["cancelling"]


def min_job_age_s() -> float:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    return float(re.search(r"^MinJobAge\s*=\s*(\d+)", out, re.M).group(1))


def forgotten(job_id: str) -> bool:
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True).returncode != 0


def wait_completed(run_dirs, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    for run_dir in run_dirs:
        while (segments.read(run_dir) or [segments.Segment(0)])[-1].how != "COMPLETED":
            assert time.time() < deadline, (run_dir.name, job_logs(run_dir)[-2000:])
            time.sleep(1)


@pytest.mark.after_min_job_age
def test_cancelled_runs_stay_cancelled_once_slurm_has_forgotten_them_and_resume(cancelled_runs):
    """The session's last test: Slurm has purged the jobs (MinJobAge after they ended, at its next purge); status,
    logs --follow and resume read the runs' records and sacct."""
    base, driver = cancelled_runs
    record = cancelled(base, driver)
    jobs, runs, env = record["jobs"], base / "runs", {**os.environ, "CT_RUNS_DIR": str(base / "runs")}
    queue_after_another(runs, env, base / "code")  # while Slurm forgets: checked once the resumes are
    purged_by = record["at"] + min_job_age_s() + 120
    print(f"waiting {max(0, purged_by - time.time()):.0f} s at most for Slurm to forget the cancelled jobs")
    while not all(forgotten(job_id) for job_id in jobs.values()) and time.time() < purged_by:
        time.sleep(5)
    assert all(forgotten(job_id) for job_id in jobs.values()), "Slurm still knows the jobs after MinJobAge + 120 s"
    checked = time.time()
    for name, job_id in jobs.items():
        assert_cancelled(observe(run_cluster, runs / name, env), job_id, CAUSES[name])
    for name in (*SINGLE_RUNS, *ELEMENTS):
        (runs / name / "finish").touch()  # the resumed job completes at once
    for name, profile in (("requeued", []), ("unstarted", ["--profile", "n1_gpu1"]),
                          ("scancelled", ["--profile", "n1_gpu1"]), ("sweep", [])):  # the whole sweep: e0 and e1
        resumed = run_cluster("resume", runs / name, *profile, env=env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    wait_completed([runs / name for name in (*SINGLE_RUNS, *ELEMENTS)], 240)
    for element in ELEMENTS:
        assert_resumed_records(runs / element, env)
    status = run_cluster("status", runs / "requeued", env=env).stdout
    assert " COMPLETED" in status.splitlines()[0] and "segment 2:" in status, status
    for name in (*SINGLE_RUNS, *ELEMENTS):  # cancelled for minutes, each resumed job started at once
        assert_short_queue_waits(runs / name, env)
    assert_dependency_wait_apart(runs / "behind", env)
    print(f"checked and resumed {len(jobs)} forgotten runs in {time.time() - checked:.0f} s")


def queue_after_another(runs: Path, env: dict, code: Path) -> None:
    """`behind`, queued --after `ahead` (a job of 60 s, within the wait for Slurm to forget: it costs no time): Slurm
    holds it on its dependency, then starts it at once."""
    for run_id, more in (("ahead", ["--", "bash", "-c", "sleep 60"]),
                         ("behind", ["--after", str(runs / "ahead"), "--", "true"])):
        done = run_cluster("ci-slurm", "n1_gpu1", "--run-id", run_id, "--no-wait", "--stale-image-ok", *more,
                           env=env, cwd=code)
        assert done.returncode == 0, done.stdout + done.stderr


def queue_waits(run_dir: Path, env: dict) -> list:
    """status's cost line's queue wait (seconds) and the wait on a dependency shown apart (None without one)."""
    status = run_cluster("status", run_dir, env=env).stdout
    found = re.search(r"queue wait (\d+) s(?: \(after (\d+) s waiting on its dependency\))?", status)
    assert found, status
    return [int(found.group(1)), int(found.group(2)) if found.group(2) else None, status]


def assert_short_queue_waits(run_dir: Path, env: dict) -> None:
    """The queue wait is Slurm's own (sacct's Eligible to Start of each allocation), not the minutes the run spent
    cancelled before its resume, nor the hour its profile held it back (issue 55 item 5)."""
    wait, depended, status = queue_waits(run_dir, env)
    # a sweep's resumed element may wait on the rest of its sweep (--max-parallel), shown apart
    assert wait < 60 and (depended is None or run_dir.parent.name == "sweep"), status


def assert_dependency_wait_apart(run_dir: Path, env: dict) -> None:
    """A run held on its --after run: the wait on the dependency (sacct's Submit to Eligible) is shown apart from
    its queue wait."""
    wait_completed([run_dir], 240)
    wait, depended, status = queue_waits(run_dir, env)
    assert wait < 30 and depended is not None and depended >= 30, status  # 60 s less the second submit's time


LSF_STOP = ["--", "bash", "stop.sh"]


def test_on_lsf_runs_cancelled_stay_cancelled_once_bjobs_forgets_them_and_resume(cpu_image, slurm_cluster,
                                                                                  tmp_path):
    """The LSF stand-in with a CLEAN_PERIOD of 3 s: a run requeued and then killed with plain bkill (bhist names
    it), and a sweep cancelled while its first element runs (its rank saves for longer than the 3 s from SIGTERM to
    SIGKILL) and its second waits to start."""
    from cancel_scenarios import STOP_SH, is_running, job_id, last_end

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "stop.sh").write_text(STOP_SH)
    runs = tmp_path / "runs"
    env = {**os.environ, "CT_RUNS_DIR": str(runs), "PATH": f"{ROOT / 'tests' / 'lsf'}:{os.environ['PATH']}",
           "CT_LSF_STATE": str(tmp_path / "lsf"), "CT_LSF_CLEAN_PERIOD": "3", "CT_LSF_REQUEUE_DELAY": "600",
           "CT_LSF_TERMINATE_INTERVAL": "3"}
    for run_id, more in (("requeued", LSF_STOP), ("sweep", ["--sweep", "trainer.max_epochs=1,2", "--max-parallel", "1",
                                                            *LSF_STOP, "slow"])):
        done = run_cluster("ci-lsf", "one_gpu", "--run-id", run_id, "--no-wait", "--stale-image-ok", *more, env=env,
                           cwd=tmp_path / "code")
        assert done.returncode == 0, done.stdout + done.stderr
    requeued, elements = runs / "requeued", [runs / element for element in ELEMENTS]
    wait_until(lambda: is_running(requeued) and is_running(elements[0]), "the run and the sweep's e0 run")
    subprocess.run(["bkill", "-s", "USR1", job_id(requeued)], env=env, check=True, capture_output=True)
    wait_until(lambda: last_end(requeued) == "REQUEUED", "the run saved and was requeued")
    subprocess.run(["bkill", job_id(requeued)], env=env, check=True, capture_output=True)  # outside run-cluster
    assert run_cluster("cancel", runs / "sweep", env=env).returncode == 0
    jobs = {name: job_id(runs / name) for name in ("requeued", *ELEMENTS)}
    wait_until(lambda: all("is not found" in subprocess.run(["bjobs", job], env=env, capture_output=True,
                                                             text=True).stderr for job in jobs.values()),
               "bjobs has forgotten every job")
    assert [s.how for s in segments.read(requeued)] == ["REQUEUED"] and not segments.read(elements[1])
    # e0's batch shell, killed mid-save, records nothing, or FAILED 130 when bkill's SIGINT ends it before its
    # SIGTERM does: either way the run was cancelled
    assert [s.how for s in segments.read(elements[0])] in ([""], ["FAILED"], ["TERMINATED"])
    for name, cause in (("requeued", "cause: cancelled outside run-cluster (bhist: TERM_OWNER: job killed by owner, "
                                     "KILL requested by "), ("sweep/e0", BY_RUN_CLUSTER), ("sweep/e1", BY_RUN_CLUSTER)):
        assert_cancelled(observe(run_cluster, runs / name, env), jobs[name], cause)
    for run_dir in (requeued, elements[0]):
        (run_dir / "finish").touch()  # e1, resumed, runs until the sweep is cancelled again
    for name in ("requeued", "sweep"):
        resumed = run_cluster("resume", runs / name, env=env, cwd=tmp_path / "code")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    wait_until(lambda: is_running(elements[1]), "the resumed e1 runs")
    again = run_cluster("cancel", runs / "sweep", env=env)
    assert again.returncode == 0 and f"job {job_id(elements[1])} (e1, resumed)" in again.stdout, again.stdout
    wait_completed([requeued, elements[0]], 120)
    assert_resumed_records(elements[0], env)
    wait_until(lambda: "CANCELLED" in run_cluster("status", elements[1], env=env).stdout.splitlines()[0],
               "the resumed e1 cancelled")


def assert_resumed_records(element: Path, env: dict) -> None:
    """A sweep element cancelled while it ran and then resumed to completion: its first segment ended (its end
    recorded by resume where the killed batch shell could not), none still shown running."""
    status = run_cluster("status", element, env=env).stdout
    assert "segment 2:" in status and "running" not in status and " RUNNING" not in status, status
    assert [s.how for s in segments.read(element)][-1] == "COMPLETED", segments.read(element)


def wait_until(predicate, what: str, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.5)
