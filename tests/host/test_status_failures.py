"""What `status` (and Run.status()) says of a run's hangs, failure-requeues, restart budget, excluded nodes, lost
steps and stragglers, read from hand-written records in the formats the batch shell and the image write (issue 43's
contracts: logs/segments.jsonl's end and train_start events, results.json's step_times). The real runs that write
them: tests/cluster/test_hangs.py (the watchdog) and the image's step-time tests."""
import json
from pathlib import Path

from host.test_api_run import ended
from host.test_end_states import Scheduler
from host.test_report import fake_run

from cluster_train.host import cli
from cluster_train.host.api.run import Run, RunStatus, State
from cluster_train.host.runs import causes, ending, failures, segments
from cluster_train.host.runs.manifest import Manifest
from cluster_train.host.views import table
from cluster_train.host.runs.run_status import status_lines, status_of

HANG_WHY = "rank 1 made no step for 62 s"
HANG = {"how": "HANG", "exit_code": 137, "stuck": {"rank": 1, "host": "n2", "step": 52, "silent_s": 62},
        "stacks": "logs/hang-1", "requeued": True, "failures": 1, "max_failures": 2,
        "excluded": [{"host": "n2", "why": HANG_WHY}]}
NODE_FAIL = {"how": "NODE_FAIL", "exit_code": 1, "requeued": True, "failures": 2, "max_failures": 2,
             "failed_nodes": ["n3"],
             "excluded": [{"host": "n2", "why": HANG_WHY}, {"host": "n3", "why": "node failure"}]}
KILLED = {"how": "FAILED", "exit_code": 137, "requeued": False, "failures": 3, "max_failures": 2,
          "died": {"rank": 1, "host": "n4"}}
STEP_TIMES = {"ranks": [{"rank": 0, "host": "n1", "median_ms": 41.2, "p90_ms": 44.0, "steps": 15},
                        {"rank": 1, "host": "n3", "median_ms": 62.8, "p90_ms": 70.1, "steps": 15}],
              "straggler": {"rank": 1, "host": "n3", "times": 1.52}}


def with_segments(run_dir: Path, *ends: dict) -> Path:
    """logs/segments.jsonl of a run whose segments ended as `ends` say (the last may be None: still running), each
    after the first resuming at epoch 2 step 40 with 12 steps lost."""
    hosts = ["n[1-2]", "n[1,3]", "n[1,4]", "n[1,5]"]
    lines = []
    for number, end in enumerate(ends, 1):
        lines.append({"event": "start", "segment": number, "job_id": "4242", "hosts": hosts[number - 1],
                      "time": f"t{number}"})
        resumed = (1, 40, 12) if number > 1 else (None, None, None)
        lines.append({"event": "train_start", "segment": number, "output_dir": str(run_dir),
                      **dict(zip(("resumed_epoch", "resumed_step", "lost_steps"), resumed))})
        if end:
            lines.append({"event": "end", "segment": number, "time": f"e{number}", **end})
    (run_dir / segments.FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run_dir


def test_a_hang_requeued_without_its_node_then_completed_shows_its_history_lost_steps_and_straggler(tmp_path,
                                                                                                     capsys):
    run_dir = with_segments(ended(fake_run(tmp_path, "hung", 0.05), "0"), HANG, {"how": "COMPLETED", "exit_code": 0})
    results = json.loads((run_dir / "results.json").read_text())
    (run_dir / "results.json").write_text(json.dumps({**results, "step_times": STEP_TIMES}))
    status = Run(run_dir).status()
    assert (status.state, status.cause) == (State.COMPLETED, "")
    first, second = status.segments
    assert (first.how, first.stuck["host"], first.stacks, first.requeued, first.failures) == (
        "HANG", "n2", "logs/hang-1", True, 1)
    assert second.resumed_from()[0]["lost_steps"] == 12 and first.resumed_from() == []
    assert status.excluded == [{"host": "n2", "why": HANG_WHY}] and status.straggler == STEP_TIMES["straggler"]
    assert cli.main(["status", str(run_dir)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1:5] == [
        "  segment 1: job 4242 on n[1-2], t1 -> e1 HANG (exit 137)",
        "    HANG: rank 1 on host n2 made no step for 62 s (at step 52); stacks in logs/hang-1",
        "    failure 1 of at most 2, requeued without n2",
        "  segment 2: job 4242 on n[1,3], t2 -> e2 COMPLETED, resumed from epoch 2 step 40 (12 steps lost)"], printed
    assert printed[5] == f"  excluded: n2 ({HANG_WHY})", printed
    assert printed[-1].startswith("  speed: precision 32,") and printed[-1].endswith(
        "; step time 41.2-62.8 ms over 2 ranks; straggler: rank 1 on n3 steps 1.52 times the median"), printed
    assert cli.main(["status", "--json", str(run_dir)]) == 0  # what a laptop reads of a run over SSH
    assert RunStatus.from_dict(json.loads(capsys.readouterr().out)) == status
    kept = json.loads((run_dir / "manifest.json").read_text())
    assert kept["segments"][0]["stuck"] == HANG["stuck"] and kept["segments"][1]["resumed_from"][0]["lost_steps"] == 12
    assert kept["speed"]["step_times"] == STEP_TIMES


def test_a_run_that_failed_beyond_its_restart_budget_is_failed_with_its_whole_history(tmp_path, capsys):
    run_dir = with_segments(ended(fake_run(tmp_path, "spent", 0.05, results=False), "137"), HANG, NODE_FAIL, KILLED)
    status = Run(run_dir).status()
    history = ("3 failures, max_failures 2: segment 1 HANG (rank 1 on host n2, no step for 62 s), "
               "segment 2 NODE_FAIL (n3), segment 3 FAILED (rank 1 on host n4, exit 137)")
    assert (status.state, status.ended, status.cause) == (State.FAILED, True, history)
    assert [e["host"] for e in status.excluded] == ["n2", "n3"] and status.straggler is None
    assert cli.main(["status", str(run_dir)]) == 0
    printed = capsys.readouterr().out
    for line in ("  segment 2: job 4242 on n[1,3], t2 -> e2 NODE_FAIL (exit 1): a node failed (n3), the scheduler "
                 "requeued the job, resumed from epoch 2 step 40 (12 steps lost)\n",
                 "    failure 2 of at most 2, requeued without n2, n3\n",
                 "  segment 3: job 4242 on n[1,4], t3 -> e3 FAILED (exit 137), resumed from epoch 2 step 40",
                 "    rank 1 died on host n4 (exit 137)\n",
                 "    failure 3, max_failures 2: not requeued, the run FAILED\n",
                 f"  excluded: n2 ({HANG_WHY}); n3 (node failure)\n", f"  cause: {history}\n"):
        assert line in printed, printed
    assert table.row_of(run_dir, Run(run_dir).manifest)["last"] == history  # `run-cluster runs`


def test_a_killed_rank_requeued_is_named_under_its_segment_while_the_run_goes_on_and_after_a_cancel(tmp_path, capsys):
    """The batch shell's record names the rank that died and its host (the job log holds every segment's lines, and
    a cause is shown only once the run has ended, and then it is the cancel)."""
    run_dir = with_segments(fake_run(tmp_path, "killed", 0.05, results=False),
                            {**KILLED, "requeued": True, "failures": 1, "died": {"rank": 1, "host": "n2"}}, None)
    lines = ["  segment 1: job 4242 on n[1-2], t1 -> e1 FAILED (exit 137)", "    rank 1 died on host n2 (exit 137)",
             "    failure 1 of at most 2, requeued"]
    assert cli.main(["status", str(run_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[1:4] == lines
    segments.record_cancel(run_dir, "4242")
    status = status_of(Manifest.read(run_dir),
                       Scheduler(said={"state": State.CANCELLED, "exit_code": "0:15", "nodes": "n[1,3]",
                                       "said": "sacct: CANCELLED by 0"}), run_dir)
    assert status.state == State.CANCELLED and status.cause.startswith("cancelled by bin/run-cluster cancel at ")
    assert status_lines(status)[1:4] == lines


def test_a_spent_budgets_cause_leads_with_what_the_log_says_of_the_failure(tmp_path):
    """max_failures 0: the first killed rank ends the run; its log names the rank and host, the record the budget."""
    run_dir = with_segments(ended(fake_run(tmp_path, "killed", 0.05, results=False), "137"),
                            {**KILLED, "failures": 1, "max_failures": 0, "died": {"rank": 1, "host": "n2"}})
    (run_dir / "logs" / "slurm-4242.out").write_text("srun: error: n2: task 1: Killed\n")
    said = "rank 1 died on host n2; its log lines above say why"
    assert Run(run_dir).status().cause == (f"{said}; 1 failures, max_failures 0: segment 1 FAILED (rank 1 on host n2, "
                                           "exit 137)")
    assert table.row_of(run_dir, Run(run_dir).manifest)["last"].startswith(said)  # `run-cluster runs`


def test_a_hang_beyond_the_budget_is_failed_by_the_runs_record_alone_and_named_as_the_cause(tmp_path):
    """The scheduler has forgotten the job and keeps no accounting: the record's HANG, not requeued, ends the run;
    and where the accounting says the job ended otherwise (its last node failed), the record's FAILED still decides."""
    last_hang = {**HANG, "requeued": False, "failures": 3, "excluded": NODE_FAIL["excluded"]}
    run_dir = with_segments(fake_run(tmp_path, "forgotten", 0.05, results=False), HANG, NODE_FAIL, last_hang)
    forgetful = Scheduler()
    forgetful.accounting_name = ""
    assert ending.run_state(forgetful, "4242", run_dir)["state"] == State.FAILED
    status = status_of(Manifest.read(run_dir), forgetful, run_dir)
    assert status.cause.endswith("segment 3 HANG (rank 1 on host n2, no step for 62 s)"), status.cause
    assert "  failure 3, max_failures 2: not requeued, the run FAILED" in "\n".join(status_lines(status))
    node_failed = Scheduler(said={"state": State.NODE_FAIL, "exit_code": "0:0", "nodes": "n1",
                                  "said": "sacct: NODE_FAIL"})
    status = status_of(Manifest.read(run_dir), node_failed, run_dir)
    assert (status.state, status.details["source"]) == (State.FAILED, "the run's record"), status
    assert status.cause.startswith("3 failures, max_failures 2: segment 1 HANG"), status.cause


def test_a_hang_not_requeued_names_its_rank_and_stacks_and_a_requeued_one_ends_nothing(tmp_path):
    run_dir = with_segments(fake_run(tmp_path, "lsf-hang", 0.05, results=False),
                            {k: v for k, v in HANG.items() if k not in ("requeued", "failures", "max_failures")})
    assert failures.cause(segments.read(run_dir)) == ("HANG: rank 1 on host n2 made no step for 62 s (at step 52); "
                                                      "stacks in logs/hang-1")
    assert failures.of_failed(run_dir, "FAILED") == failures.cause(segments.read(run_dir))
    with_segments(run_dir, HANG, None)  # requeued and running again: nothing has ended the run
    assert failures.cause(segments.read(run_dir)) == ""
    assert failures.excluded_line(segments.read(run_dir)) == f"excluded: n2 ({HANG_WHY})"


def test_odd_or_older_records_show_what_they_have(tmp_path):
    """A record from a batch shell before issue 43, or with a key of the wrong type, reads as far as it goes."""
    run_dir = with_segments(fake_run(tmp_path, "old", 0.05, results=False),
                            {"how": "HANG", "exit_code": 137, "stuck": "rank 1", "failures": "1", "excluded": ["n2"]})
    (found,) = segments.read(run_dir)
    assert (found.stuck, found.failures, found.excluded, found.budget_spent) == ({}, None, [], False)
    assert failures.segment_lines(found) == ["segment 1: job 4242 on n[1-2], t1 -> e1 HANG (exit 137)"]


def test_a_failed_run_without_a_record_of_its_hang_is_named_from_the_watchdogs_log_line(tmp_path):
    """The watchdog's line comes before the ranks it ended (whose exits say nothing of why): the hang is the cause."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "job-7.err").write_text(
        "[cluster-train] error: rank 1 on host n2 made no step for 62 s (hang_timeout 60 s); stacks in logs/hang-1\n"
        "[cluster-train] error: rank 0 on host n1 exited with status 143; ending the other ranks\n"
        "[NCCL] Watchdog caught collective operation timeout\n")
    assert causes.diagnose(tmp_path) == ("HANG: rank 1 on host n2 made no step for 62 s (hang_timeout 60 s); stacks in "
                                         "logs/hang-1: the progress watchdog ended the job; the stacks show where the "
                                         "rank stopped")
