"""Issue 56 item 2: cluster_train/image/resume_lightning.py, the documented callback, in the host's Lightning. It
subclasses the Callback of the Lightning the script imported and installs its SIGUSR1 handler before fit (so
Lightning's own auto-requeue never installs); examples/lightning_unchanged/resumable.py warned mid-epoch saves
last.ckpt and exits 75, and its next start resumes and ends bit for bit as train.py uninterrupted (the plain
DataLoader fast-forwarded). On the test Slurm cluster over 2 nodes: tests/cluster/test_lightning_unchanged.py."""
import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from conftest import ROOT  # noqa: E402
from cluster_train.image import resume_lightning  # noqa: E402

EXAMPLE = ROOT / "examples" / "lightning_unchanged"


@pytest.fixture
def own_sigusr1():
    before = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, before)


def test_the_callback_is_the_scripts_lightnings_and_takes_sigusr1_first(own_sigusr1, tmp_path):
    callback = resume_lightning.ResumeOnSignal(tmp_path)
    assert isinstance(callback, pl.Callback) and callback.state_key == "ResumeOnSignal"
    assert callback.path == tmp_path / "last.ckpt"
    assert signal.getsignal(signal.SIGUSR1) == callback._on_warning  # Lightning keeps a handler it finds
    if "lightning.pytorch" in sys.modules or _installed("lightning"):
        import lightning.pytorch as L

        assert isinstance(resume_lightning.ResumeOnSignal(), L.Callback)


def _installed(name: str) -> bool:
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def train(script: str, run_dir, env, *args, warn_after: str = ""):
    """The example under `env` (its CT_RUN_DIR, CT_CHECKPOINT_DIR); SIGUSR1 once `warn_after` is in its output."""
    run_dir.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, str(EXAMPLE / script), "--epochs", "3", *args], cwd=EXAMPLE,
                            env={**env, "CT_RUN_DIR": str(run_dir)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = []
    for line in proc.stdout:
        out.append(line)
        if warn_after and warn_after in line:
            time.sleep(0.3)  # into the next epoch's batches: a mid-epoch stop
            proc.send_signal(signal.SIGUSR1)
            warn_after = ""
    return proc.wait(300), "".join(out)


@pytest.mark.slow  # three small trainings, about a minute on a busy machine
def test_a_warned_lightning_run_resumes_bit_for_bit(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CT_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    rc, out = train("train.py", tmp_path / "whole", env)
    assert rc == 0, out[-3000:]
    rc, out = train("resumable.py", tmp_path / "cut", env, "--step-sleep", "0.1", warn_after="epoch 0 done")
    assert rc == 75 and "saved" in out and "(batch " in out, out[-3000:]  # stopped inside epoch 1, not at its end
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    rc, out = train("resumable.py", tmp_path / "cut", env)
    assert rc == 0 and "[cluster-train] resumed at batch" in out, out[-3000:]
    whole, cut = (torch.load(d / "final_weights.pt", weights_only=True) for d in (tmp_path / "whole", tmp_path / "cut"))
    assert [k for k in whole if not torch.equal(whole[k], cut[k])] == []


def test_a_loader_of_unknown_length_is_not_fast_forwarded_and_says_so(capsys):
    """Lightning prefetches an unsized loader as it makes its iterator: skipping batches there would misalign them."""
    from types import SimpleNamespace

    loop = SimpleNamespace(_combined_loader=SimpleNamespace(flattened=[iter(range(3))]),
                           _data_fetcher=SimpleNamespace(length=None))
    state = torch.get_rng_state()
    resume_lightning.fast_forward(SimpleNamespace(fit_loop=loop, is_global_zero=True, current_epoch=1),
                                  {"batches": 2, "before_iter": None, "rng": None})
    assert "cannot be moved on to the saved batch" in capsys.readouterr().out
    assert torch.equal(torch.get_rng_state(), state)
