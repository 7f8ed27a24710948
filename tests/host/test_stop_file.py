"""The trainer's stop request by file (cluster_train/image/stop.py): the batch shell writes $CT_STOP_FILE at the
time-limit warning, and each rank looks for it at most once a second, whatever its step time. (That a warned run saves
and resumes bit for bit through it, on Slurm with a node's ranks in one container and on LSF: test_long_runs.)"""
import pytest

from cluster_train.image import stop


@pytest.fixture
def clock(monkeypatch, tmp_path):
    now = [1000.0]
    monkeypatch.setattr(stop.time, "monotonic", lambda: now[0])
    monkeypatch.setenv(stop.STOP_FILE, str(tmp_path / "stop-1"))
    stop.reset()
    yield now
    stop.reset()


def test_a_rank_sees_the_stop_file_within_a_second_and_stats_it_at_most_once_a_second(clock, tmp_path):
    assert stop.poll() == ""  # no file: no stop
    (tmp_path / "stop-1").write_text("SIGUSR1\n")
    clock[0] += 0.5
    assert stop.poll() == ""  # looked half a second ago: not again yet
    clock[0] += 0.5
    assert stop.poll() == "SIGUSR1" == stop.requested()


@pytest.mark.parametrize("text, asked", [("SIGTERM\n", "SIGTERM"), ("anything\n", "SIGUSR1"), ("", "")])
def test_the_file_names_the_signal_it_stands_for(clock, tmp_path, text, asked):
    (tmp_path / "stop-1").write_text(text)  # empty: a write the shell has not finished (it renames a whole file in)
    assert stop.poll() == asked


def test_a_signal_already_received_is_the_request(clock, tmp_path):
    stop._handler(stop.signal.SIGTERM, None)
    (tmp_path / "stop-1").write_text("SIGUSR1\n")
    assert stop.poll() == "SIGTERM"
