"""Issue 56 review: the two resume helpers (cluster_train/image/resume.py's Checkpointer, resume_lightning.py's
ResumeOnSignal) read CT_REQUEUE_EXIT by one rule: a value that is no exit status is refused when the helper is made,
before any training, in one line naming it. ResumeOnSignal replaced it with 75 silently."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

from cluster_train.image import resume, resume_lightning  # noqa: E402


def test_resume_on_signal_refuses_a_bad_requeue_exit_before_fit(stop_handlers_restored, tmp_path, monkeypatch):
    monkeypatch.setenv("CT_REQUEUE_EXIT", "seventy-five")
    with pytest.raises(ValueError, match="CT_REQUEUE_EXIT='seventy-five' is not an exit status"):
        resume_lightning.ResumeOnSignal(tmp_path)
    monkeypatch.setenv("CT_REQUEUE_EXIT", "76")
    assert resume_lightning.ResumeOnSignal(tmp_path).requeue_code == 76
    assert resume_lightning.requeue_exit is resume.requeue_exit  # one helper, not two copies


class _OnGpu:
    """A model whose parameters are on cuda:1 (no GPU needed to ask where they are)."""

    def __init__(self, torch):
        self.param = type("P", (), {"device": torch.device("cuda", 1)})()

    def parameters(self):
        return iter([self.param])

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_the_stop_vote_under_nccl_is_on_the_ranks_own_gpu_not_cuda_0(monkeypatch):
    """A DDP script that puts its model on cuda:LOCAL_RANK without torch.cuda.set_device leaves every rank's current
    device at cuda:0: the all-reduce there, from every rank of a node, is NCCL's duplicate-GPU error or a hang."""
    import torch

    nccl = type("Dist", (), {"get_backend": staticmethod(lambda: "nccl")})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resume._device(nccl, {"model": _OnGpu(torch)}) == torch.device("cuda", 1)
    assert resume._device(nccl, {"model": torch.nn.Linear(1, 1)}) == torch.device("cuda", 0)  # none on a GPU
    gloo = type("Dist", (), {"get_backend": staticmethod(lambda: "gloo")})
    assert resume._device(gloo, {"model": _OnGpu(torch)}) == torch.device("cpu")


def test_one_rng_record_for_both_helpers_travels_through_a_weights_only_load(tmp_path):
    """resume.py and resume_lightning.py kept two copies of the RNG states; the one left is plain types (Lightning
    loads its checkpoints with weights_only=True, which refuses numpy's array), and puts back what it took."""
    import io
    import random

    import numpy as np
    import torch

    assert resume_lightning._rng_states is resume._rng_states
    states = resume._rng_states()
    buffer = io.BytesIO()
    torch.save(states, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    drawn = (random.random(), np.random.rand(), torch.rand(1).item())
    resume._set_rng_states(loaded)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == drawn
