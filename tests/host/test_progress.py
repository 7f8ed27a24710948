"""Progress of the long waits: the library's events and the tools' output they are read from
(cluster_train/host/progress.py), and the command line's renderer (cluster_train/host/status_line.py): one line
rewritten in place on a terminal, plain lines at a sane rate in a pipe."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from cluster_train.host.progress import Meter, Progress, build_stage, epoch_stage, pieces, rsync_done
from cluster_train.host.runs.follow import Tail, drain, watch
from cluster_train.host.runs.sweep_state import counts_stage, sweep_counts
from cluster_train.host.scheduling.facts import State
from cluster_train.host.status_line import CLEAR, StatusLine, describe, duration

MB = 10**6


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_and_time_left_count_only_what_arrived_since_a_resume():
    clock = Clock()
    meter = Meter("sending cpu.sif", 100 * MB, resumed_from=40 * MB, clock=clock)
    assert meter.at().done == 40 * MB and meter.last.rate is None  # nothing measured yet
    clock.now = 10
    p = meter.at(60 * MB)
    assert p.rate == 2 * MB and p.eta_s == 20 and p.fraction == 0.6
    assert describe(p) == "sending cpu.sif: 60.0 MB of 100.0 MB (60 %), 2.0 MB/s, 20s left, resuming from 40.0 MB"
    clock.now = 30
    assert describe(meter.at(100 * MB, final=True)) == ("sending cpu.sif: 100.0 MB of 100.0 MB (100 %), 2.0 MB/s, "
                                                        "in 30s, resuming from 40.0 MB")


def test_a_label_names_an_image_by_the_first_12_digits_of_its_digest():
    digest = "09f9fe0a33be" + "a" * 52
    assert Meter(f"pushing {digest}.sif to oras://r/lab/x:sha256-{digest}").at().label == (
        "pushing 09f9fe0a33be.sif to oras://r/lab/x:sha256-09f9fe0a33be")


def test_a_push_reads_how_much_apptainer_has_read_of_its_file():
    from cluster_train.host.images.oci import bytes_read

    before = bytes_read(os.getpid())
    (ROOT / "README.md").read_bytes()
    assert bytes_read(os.getpid()) >= before + (ROOT / "README.md").stat().st_size
    assert bytes_read(2**22 + 1) is None  # no such process (pid_max is at most 2**22)


def test_a_stage_and_a_duration_read_as_words():
    assert [duration(s) for s in (7, 80, 3720)] == ["7s", "1m20s", "1h02m"]
    p = Progress("building images/cpu.sif", unit="", stage="step 4/7: %post", elapsed_s=80)
    assert describe(p) == "building images/cpu.sif: step 4/7: %post, 1m20s"
    assert describe(Progress("packing cifar", 37 * MB, rate=MB, elapsed_s=3)) == "packing cifar: 37.0 MB, 1.0 MB/s, 3s"


def events(clock: Clock, shown: StatusLine, total: int = 100 * MB):
    """A transfer's events, one a second, 1 MB each."""
    meter = Meter("sending", total, clock=clock)
    for done in range(0, total + 1, MB):
        clock.now = done / MB
        shown(meter.at(done, final=done == total))


def test_a_pipe_gets_a_plain_line_each_tenth_of_the_way_every_30_s_and_the_last():
    clock, out = Clock(), io.StringIO()
    shown = StatusLine(out, tty=False, clock=clock)
    events(clock, shown)
    shown.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert [line.split(" (")[1].split(" %")[0] for line in lines] == ["2", *(str(n) for n in range(10, 101, 10))]
    assert lines[-1].endswith("in 1m40s") and lines.count(lines[-1]) == 1
    slow, out = Clock(), io.StringIO()
    shown, meter = StatusLine(out, tty=False, clock=slow), Meter("sending", 1000 * MB, clock=slow)
    for second in range(0, 70, 10):  # 1 MB every 10 s: no tenth of the way passed, and yet
        slow.now = second
        shown(meter.at(second / 10 * MB))
    assert [line.split(", ")[-1] for line in out.getvalue().splitlines()] == ["2h46m left", "2h46m left"]  # 10, 40 s
    quick, out = Clock(), io.StringIO()
    shown, meter = StatusLine(out, tty=False, clock=quick), Meter("pulling", clock=quick)
    shown(meter.at(0))
    quick.now = 1.5
    shown(meter.at(MB))  # it ends (or fails) here: within 2 s, a pipe says nothing but the final line
    assert out.getvalue() == ""
    unknown = StatusLine(out := io.StringIO(), tty=False, clock=slow)
    for stage in ("PENDING", "RUNNING", "RUNNING", "RUNNING, epoch 1/2 step 4", "RUNNING, epoch 1/2 step 4"):
        unknown(Progress("job 7", unit="", stage=stage))
    assert out.getvalue().splitlines() == ["job 7: PENDING", "job 7: RUNNING", "job 7: RUNNING, epoch 1/2 step 4"]


def test_a_terminal_gets_one_line_rewritten_in_place_cut_to_its_width_and_erased():
    clock, out = Clock(), io.StringIO()
    shown = StatusLine(out, tty=True, width=40, clock=clock)
    events(clock, shown, 3 * MB)
    shown.above("a log line\n", out)
    shown.close()
    written = out.getvalue()
    assert "\n" not in written.replace("a log line\n", "")
    drawn = [piece for piece in written.split(CLEAR) if piece]
    assert all(len(piece) <= 39 for piece in drawn if "log" not in piece)
    assert drawn[-2:] == ["a log line\n", drawn[-3]]  # the log above it, the status line drawn again under it
    assert written.endswith(CLEAR) and drawn[0] == "sending: 0.0 MB of 3.0 MB (0 %)"


def test_the_tools_progress_output_is_read_into_numbers():
    rsync = b"\r         32,768   0%    0.00kB/s    0:00:00  \r     11,042,816  36%    9.97MB/s    0:00:01  \r"
    said = list(pieces([rsync[:30], rsync[30:], b"\n\nTotal bytes sent: 12\n"]))
    assert [rsync_done(p) for p in said if rsync_done(p) is not None] == [32768, 11042816]
    assert "Total bytes sent: 12" in said
    assert [build_stage(line) for line in ("INFO:    Starting build...", "INFO:    Running post scriptlet",
                                           "+ apt-get clean", "INFO:    Running testscript",
                                           "INFO:    Creating SIF file...")] == [
        "step 1/7: bootstrap", "step 4/7: %post", None, "step 6/7: %test", "step 7/7: SIF file"]
    log = ("[cluster-train] epoch 1/3 step 4 train/loss 2.3010 val/loss 2.2000 (3.1 s)\nnoise\n"
           "[cluster-train] epoch 2/3 step 8 train/loss 1.9000 val/loss - (5.0 s)\n")
    assert epoch_stage(log) == "epoch 2/3 step 8 train/loss 1.9000" and epoch_stage("noise\n") is None
    assert sweep_counts([State.COMPLETED, State.RUNNING, State.FAILED, State.PENDING, State.CANCELLED,
                         State.COMPLETED]) == {"done": 2, "running": 1, "failed": 2, "queued": 1}
    assert counts_stage(sweep_counts([State.PENDING])) == "0 done, 0 running, 0 failed, 1 queued"


class Ends:
    """A scheduler whose job runs for `polls` polls, then completes; its log grows by one epoch a poll."""

    name = accounting_name = "fake"

    def __init__(self, log: Path, polls: int):
        self.log, self.left = log, polls

    def state(self, job_id, run_dir=None):
        self.left -= 1
        with self.log.open("a") as f:
            f.write(f"[cluster-train] epoch {3 - self.left}/3 step {4 * (3 - self.left)} train/loss 1.0 "
                    f"val/loss - (1 s)\n[cluster-train] epoch 9/9 step 9")  # half a line: not read as one
        return {"state": State.RUNNING if self.left > 0 else State.COMPLETED}

    def accounting(self, job_id):
        return None


def test_a_wait_reports_the_state_and_the_last_whole_epoch_line_of_rank_0(tmp_path):
    (tmp_path / "logs").mkdir()
    said = []
    drain(watch(Ends(tmp_path / "logs" / "job.out", 3), "7", tmp_path, None, Tail(tmp_path / "logs"), 0, said.append))
    assert [p.stage for p in said] == ["RUNNING", "RUNNING, epoch 1/3 step 4 train/loss 1.0",
                                       "COMPLETED, epoch 3/3 step 12 train/loss 1.0"] and said[-1].final, said


BUILD = """echo 'INFO:    Starting build...'
echo 'I: Retrieving InRelease'
echo 'INFO:    Running post scriptlet'
echo '+ sh /opt/cluster-train/containers/install.sh cpu'
echo 'pip: no matching distribution' >&2
exit 3
"""


def test_make_image_shows_the_build_s_step_keeps_its_log_and_shows_its_end_when_it_fails(tmp_path):
    """containers/images.mk runs apptainer build through build_log: here a stand-in that says what apptainer says."""
    (tmp_path / "build.sh").write_text(BUILD)
    log = tmp_path / "cpu.apptainer.log"
    done = subprocess.run([sys.executable, "-m", "cluster_train.host.images.build_log", "--log", str(log), "--label",
                           "building images/cpu.sif", "--", "sh", str(tmp_path / "build.sh")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 3 and done.stdout == ""
    said = done.stderr.splitlines()
    assert said[:2] == ["building images/cpu.sif: step 1/7: bootstrap", "building images/cpu.sif: step 4/7: %post"]
    assert said[2].startswith("building images/cpu.sif: failed at step 4/7: %post")  # the final line
    assert said[3:] == log.read_text().splitlines()[-40:] + [f"sh failed (exit status 3); the whole log: {log}"]
    assert "pip: no matching distribution" in log.read_text() and "I: Retrieving InRelease" in log.read_text()


class Scripted:
    """A scheduler whose jobs go through the states given for each, one a poll, the last one staying."""

    name = accounting_name = "fake"

    def __init__(self, states):
        self.states = states

    def state(self, job_id, run_dir=None):
        left = self.states[job_id]
        return {"state": left.pop(0) if len(left) > 1 else left[0]}

    def accounting(self, job_id):
        return None

    def with_cause(self, state, *_):
        return state


def test_a_sweep_s_wait_reports_how_many_are_done_running_failed_and_queued(tmp_path, monkeypatch):
    from cluster_train.host.runs import sweep_state

    elements = [{"index": n, "job_id": str(n), "run_dir": str(tmp_path / f"e{n}"), "values": {}} for n in range(3)]
    (tmp_path / "sweep.json").write_text(json.dumps({"sweep_id": "sw", "scheduler": "fake", "elements": elements}))
    R, P, C, F = State.RUNNING, State.PENDING, State.COMPLETED, State.FAILED
    scheduler = Scripted({"0": [R, C], "1": [P, R, R, F], "2": [P, P, P, R, C]})
    monkeypatch.setattr(sweep_state, "adapter", lambda name: scheduler)
    said = []
    assert sweep_state.wait_elements(tmp_path, 60, 0, said.append)
    assert [p.stage for p in said] == ["0 done, 1 running, 0 failed, 2 queued", "1 done, 1 running, 0 failed, 1 queued",
                                       "1 done, 1 running, 0 failed, 1 queued", "1 done, 1 running, 1 failed, 0 queued",
                                       "2 done, 0 running, 1 failed, 0 queued"]
    assert said[-1].final and not any(p.final for p in said[:-1]) and said[0].label == "sweep sw"
