"""Issue 56 item 3: cluster_train/image/resume.py, the resume helper for plain PyTorch scripts. In process: the save
and load round trip (weights, optimizer, RNG, extra values), the defaults outside cluster-train, the requeue exit and
its refusals. Then the nanoGPT-shaped example (examples/nanogpt_shaped) as two real gloo ranks, launched as srun
does: SIGUSR1 to one rank stops both at the same step, and two such stops end bit for bit as an uninterrupted run.
Through the job scripts on the test Slurm cluster: tests/cluster/test_resume_helper_jobs.py."""
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from cluster_train.image import resume  # noqa: E402
from cluster_train.image.localrun import free_port  # noqa: E402

EXAMPLE = ROOT / "examples" / "nanogpt_shaped"
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8", "--eval_interval=50",
        "--eval_iters=2", "--warmup_iters=20", "--log_interval=5", "--max_iters=300"]


@pytest.fixture(autouse=True)
def own_signal_handlers(monkeypatch, stop_handlers_restored):
    """Checkpointer installs the stop handlers in pytest's own process, and reads the job's variables."""
    for name in ("CT_CHECKPOINT_DIR", "CT_REQUEUE_EXIT", "CT_RUN_DIR", "CT_STOP_FILE"):
        monkeypatch.delenv(name, raising=False)


def model_and_optimizer(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt


def test_save_then_load_restores_weights_optimizer_rng_and_extra(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no CT_CHECKPOINT_DIR: ./checkpoints
    model, opt = model_and_optimizer(0)
    saver = resume.Checkpointer(model=model, optimizer=opt)
    assert saver.load() == 0 and saver.extra == {}  # nothing saved yet: start at 0
    random.seed(5)
    saver.save(17, best_val_loss=1.5)
    assert os.listdir(tmp_path / "checkpoints") == ["last.ckpt"]  # written beside, then renamed: nothing else left
    expected = (torch.rand(3), random.random())
    fresh, fresh_opt = model_and_optimizer(1)
    loader = resume.Checkpointer(model=fresh, optimizer=fresh_opt)
    assert loader.load() == 17 and loader.extra == {"best_val_loss": 1.5}
    assert torch.equal(fresh.weight, model.weight) and fresh_opt.state_dict()["state"][0]["exp_avg"].equal(
        opt.state_dict()["state"][0]["exp_avg"])
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]  # the RNG goes on as it would


def test_the_checkpoint_dir_and_requeue_exit_come_from_the_job(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CT_CHECKPOINT_DIR", str(tmp_path / "ckpts"))
    model, opt = model_and_optimizer(0)
    saver = resume.Checkpointer(model=model, optimizer=opt)
    saver.save(3)
    assert (tmp_path / "ckpts" / "last.ckpt").is_file()
    assert f"saved {tmp_path}/ckpts/last.ckpt at step 3" in capsys.readouterr().out
    with pytest.raises(SystemExit) as default:
        saver.requeue()
    monkeypatch.setenv("CT_REQUEUE_EXIT", "76")
    with pytest.raises(SystemExit) as set_by_the_job:
        resume.Checkpointer(model=model).requeue()
    assert (default.value.code, set_by_the_job.value.code) == (75, 76)
    monkeypatch.setenv("CT_REQUEUE_EXIT", "seventy")  # refused before any training, not at the first requeue
    with pytest.raises(ValueError, match=r"CT_REQUEUE_EXIT='seventy' is not an exit status; unset it or set"):
        resume.Checkpointer(model=model)


def test_a_signal_sets_the_stop_and_bad_objects_are_refused(tmp_path):
    model, opt = model_and_optimizer(0)
    saver = resume.Checkpointer(tmp_path, model=model, optimizer=opt)
    assert not saver.should_stop()
    os.kill(os.getpid(), signal.SIGUSR1)  # the time-limit warning: a flag, not a kill
    assert saver.should_stop()
    with pytest.raises(TypeError, match=r"Checkpointer\(steps\): pass the model, optimizer, \.\.\. as name=object"):
        resume.Checkpointer(model=model, steps=3)
    saver.save(1)
    with pytest.raises(ValueError, match=r"holds \['model', 'optimizer'\] but Checkpointer was given \['model'\]"):
        resume.Checkpointer(tmp_path, model=model).load()


def test_importing_the_helper_imports_no_torch():
    done = subprocess.run([sys.executable, "-c", "import sys, cluster_train.image.resume; print('torch' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


EXITING = """import sys, torch
from cluster_train.image.resume import Checkpointer
saver = Checkpointer(sys.argv[1], model=torch.nn.Linear(2, 2))
print("ready", flush=True)
sys.stdin.readline()
saver.requeue()
"""


def test_a_sigterm_while_exiting_to_be_requeued_keeps_the_requeue_code(tmp_path):
    """srun SIGTERMs the other ranks once one has exited 75; one still exiting must exit 75 too, not die of it (143):
    Python's exit puts the default handlers back before torch's long teardown, so the TERMs keep coming till then."""
    codes = []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", EXITING, str(tmp_path)], cwd=ROOT, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdout.readline() == "ready\n"
        child.stdin.write("go\n")
        child.stdin.flush()
        while child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
            time.sleep(0.0005)
        codes.append(child.returncode)
        child.stdout.close()
        child.stdin.close()
    assert codes == [75] * 2


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("chars")
    subprocess.run([sys.executable, str(EXAMPLE / "prepare.py"), "--demo", str(out)], check=True, capture_output=True)
    return out


def train(run_dir, data_dir, signal_at=None):
    """The example as 2 gloo ranks (the environment srun gives them); SIGUSR1 to rank 1 alone once rank 0 printed
    `signal_at`. Both exit codes and rank 0's output."""
    port, procs = free_port(), []
    for rank in range(2):
        env = dict(os.environ, CT_RUN_DIR=str(run_dir), CT_CHECKPOINT_DIR=str(run_dir / "checkpoints"),
                   CT_DATA_ROOT=str(data_dir), PYTHONPATH=str(ROOT), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), USE_LIBUV="0", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "train.py", *TINY], cwd=EXAMPLE, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    lines, hung = [], threading.Timer(120, lambda: [p.kill() for p in procs])  # a rank left waiting fails, not hangs
    hung.start()
    for line in procs[0].stdout:
        lines.append(line)
        if signal_at and line.startswith(signal_at):
            procs[1].send_signal(signal.SIGUSR1)
            signal_at = None
    codes = [p.wait() for p in procs]
    hung.cancel()
    procs[1].stdout.close()
    return codes, "".join(lines)


def checkpoint_tensors(run_dir):
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return saved["step"], saved["state"]["model"], saved["state"]["optimizer"]["state"]


@pytest.mark.slow  # three 2-rank trainings of a few seconds each
def test_two_ranks_stopped_twice_on_one_rank_end_as_an_uninterrupted_run(tmp_path, data_dir):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert train(whole, data_dir)[0] == [0, 0]
    stopped = []
    for signal_at in ("iter 10:", "iter 160:"):
        codes, out = train(cut, data_dir, signal_at=signal_at)
        assert codes == [75, 75], out  # both ranks stopped at one step, asking for a requeue
        stopped.append(out)
    last = train(cut, data_dir)
    stops = [int(out.rsplit("last.ckpt at step ", 1)[1].split()[0]) for out in stopped]
    assert 10 < stops[0] < 160 < stops[1] < 300, stops  # mid-run, not at an evaluation boundary only
    assert last[0] == [0, 0] and f"resuming from {cut}/checkpoints/last.ckpt at step {stops[1]}" in last[1], last[1]
    step, weights, optimizer = checkpoint_tensors(cut)
    step_whole, weights_whole, optimizer_whole = checkpoint_tensors(whole)
    assert step == step_whole == 300
    assert all(torch.equal(weights[k], weights_whole[k]) for k in weights_whole)
    assert all(torch.equal(optimizer[i]["exp_avg_sq"], optimizer_whole[i]["exp_avg_sq"]) for i in optimizer_whole)
    assert (cut / "metrics.csv").read_text() == (whole / "metrics.csv").read_text()
    assert json.loads((cut / "results.json").read_text()) == json.loads((whole / "results.json").read_text())
