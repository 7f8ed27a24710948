"""Issue 56 review: the two resume helpers (cluster_train/image/resume.py's Checkpointer, resume_lightning.py's
ResumeOnSignal) read CT_REQUEUE_EXIT by one rule: a value that is no exit status is refused when the helper is made,
before any training, in one line naming it. ResumeOnSignal replaced it with 75 silently."""
import signal

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

from cluster_train.image import resume, resume_lightning  # noqa: E402


@pytest.fixture
def own_sigusr1():
    before = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, before)


def test_resume_on_signal_refuses_a_bad_requeue_exit_before_fit(own_sigusr1, tmp_path, monkeypatch):
    monkeypatch.setenv("CT_REQUEUE_EXIT", "seventy-five")
    with pytest.raises(ValueError, match="CT_REQUEUE_EXIT='seventy-five' is not an exit status"):
        resume_lightning.ResumeOnSignal(tmp_path)
    monkeypatch.setenv("CT_REQUEUE_EXIT", "76")
    assert resume_lightning.ResumeOnSignal(tmp_path).requeue_code == 76
    assert resume_lightning.requeue_exit is resume.requeue_exit  # one helper, not two copies
