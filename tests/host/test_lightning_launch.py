"""Issue 56 item 2 on the host: an unmodified Lightning script under `python -m train command` (cluster_train/image/
command.py) sees the job's nodes and ranks, in the environment each launch shape gives it (srun: Lightning's
SLURMEnvironment; blaunch and the ranks the runner starts itself: its LightningEnvironment, which reads LOCAL_RANK,
NODE_RANK, WORLD_SIZE), while a value the
script passes still wins; Lightning's SLURM auto-requeue never gets SIGUSR1, and a script that does not handle the
warning still dies of it; `standalone: true` (--standalone) leaves the launcher's variables unset, and is refused for
more than one rank. The jobs on the test Slurm cluster: tests/cluster/test_lightning_unchanged.py."""
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT
from host.test_preflight import refused, run_cluster

from cluster_train.image import launch_env

SLURM_2X1 = {"CT_LAUNCH": "srun", "CT_NODES": "2", "CT_RANKS_PER_NODE": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_NODEID": "0", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "2",
             "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": "29999"}
BLAUNCH_2X1 = {"CT_LAUNCH": "blaunch", "CT_NODES": "2", "CT_RANKS_PER_NODE": "1", "CT_GLOBAL_RANK": "1",
               "CT_LOCAL_RANK": "0", "CT_NODE_RANK": "1", "CT_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": "29999"}
ONE_HOST_2 = {"CT_LAUNCH": "lightning", "CT_NODES": "1", "CT_RANKS_PER_NODE": "2"}

# what each rank's Trainer() made of the job: printed as one JSON line
TRAINER = """
    import json, signal, sys
    import pytorch_lightning as pl
    try:
        trainer = pl.Trainer(logger=False, enable_checkpointing=False, {args})
    except ValueError as err:  # Lightning's own refusal of a shape that does not match the job's
        sys.stdout.write(json.dumps({{"refused": str(err)}}) + "\\n")
        raise SystemExit(0)
    trainer._signal_connector.register_signal_handlers()  # what fit does first
    usr1 = signal.getsignal(signal.SIGUSR1)
    sys.stdout.write(json.dumps({{"env": type(trainer._accelerator_connector.cluster_environment).__name__,
                                 "strategy": type(trainer.strategy).__name__, "nodes": trainer.num_nodes,
                                 "devices": trainer.num_devices, "world": trainer.world_size,
                                 "rank": trainer.global_rank, "usr1": getattr(usr1, "__module__", str(usr1)),
                                 "usr1_type": type(usr1).__name__}}) + "\\n")
"""


def command(tmp_path, script, shape, env=(), **config):
    """`python -m train command` on the host, as the job script starts it under `shape`: a run directory with
    config.yaml and code/; its lines of JSON, its exit status, its output."""
    run_dir = tmp_path / "run"
    (run_dir / "code").mkdir(parents=True, exist_ok=True)  # tmp_path may be new: parents
    (run_dir / "code" / "rank.py").write_text(textwrap.dedent(script))
    (run_dir / "config.yaml").write_text(json.dumps({"command": [sys.executable, "rank.py"], "code": str(tmp_path),
                                                     **config}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), **shape, **dict(env)}
    done = subprocess.run([sys.executable, "-m", "train", "command", "--config", str(run_dir / "config.yaml")],
                          env=env, capture_output=True, text=True, timeout=120)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")], done


def test_the_trainers_defaults_are_the_jobs_shape_and_a_users_own_is_kept():
    assert launch_env.lightning_env(SLURM_2X1) == {"PL_TRAINER_NUM_NODES": "2", "PL_TRAINER_DEVICES": "1",
                                                   "PL_TRAINER_STRATEGY": "ddp"}
    assert launch_env.lightning_env({"CT_NODES": "1", "CT_RANKS_PER_NODE": "1"}) == {
        "PL_TRAINER_NUM_NODES": "1", "PL_TRAINER_DEVICES": "1"}  # one rank: Lightning's own strategy
    assert launch_env.lightning_env({**ONE_HOST_2, "PL_TRAINER_STRATEGY": "fsdp"}) == {
        "PL_TRAINER_NUM_NODES": "1", "PL_TRAINER_DEVICES": "2"}  # a profile's env: PL_TRAINER_STRATEGY stays
    assert launch_env.python_hook_env({"PYTHONPATH": "/mine"})["PYTHONPATH"] == f"{launch_env.HOOK_DIR}:/mine"


def test_every_rank_gets_the_trainers_defaults_and_the_hook(tmp_path):
    ranks, done = command(tmp_path, """
        import json, os, signal, sys
        sys.stdout.write(json.dumps({**{k: v for k, v in os.environ.items() if k.startswith("PL_TRAINER_")},
                                     "path": os.environ["PYTHONPATH"],
                                     "usr1": signal.getsignal(signal.SIGUSR1) != signal.SIG_DFL}) + "\\n")
        """, ONE_HOST_2, env={"PL_TRAINER_MAX_EPOCHS": "3"})
    assert done.returncode == 0, done.stderr
    assert ranks == 2 * [{"PL_TRAINER_NUM_NODES": "1", "PL_TRAINER_DEVICES": "2", "PL_TRAINER_STRATEGY": "ddp",
                          "PL_TRAINER_MAX_EPOCHS": "3", "path": f"{launch_env.HOOK_DIR}:{ROOT}", "usr1": True}]


def test_a_script_that_does_not_handle_the_warning_still_dies_of_it(tmp_path):
    """The hook's SIGUSR1 handler ends the process as the default action does (the batch shell then sees 138), and
    the sitecustomize it stands before (the user's here, Debian's in the image) still runs."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("print('the next sitecustomize ran', flush=True)\n")
    _, done = command(tmp_path, """
        import os, signal, sys, time
        print("handler:", "python" if callable(signal.getsignal(signal.SIGUSR1)) else "default", flush=True)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(30)
        """, {**ONE_HOST_2, "CT_RANKS_PER_NODE": "1"}, env={"PYTHONPATH": f"{ROOT}:{mine}"})
    assert done.returncode == 128 + 10, done.stdout + done.stderr  # killed by SIGUSR1, as without the hook
    assert "handler: python" in done.stdout and "the next sitecustomize ran" in done.stdout, done.stdout


@pytest.mark.slow  # four Lightning imports, side by side: about 20 s on a busy machine
def test_an_unmodified_trainer_joins_every_rank_and_leaves_sigusr1_alone(tmp_path):
    """srun: Lightning's SLURMEnvironment; blaunch and the runner's own ranks: its LightningEnvironment; each Trainer()
    is one model over the job's world, and an argument the script passes (num_nodes=1) is kept as it is."""
    pytest.importorskip("pytorch_lightning")
    cases = {"srun": (SLURM_2X1, ""), "blaunch": (BLAUNCH_2X1, ""), "one host": (ONE_HOST_2, ""),
             "its own": (SLURM_2X1, "num_nodes=1")}
    with ThreadPoolExecutor(len(cases)) as pool:
        found = dict(zip(cases, pool.map(lambda case: command(tmp_path / case[0], TRAINER.format(args=case[1][1]),
                                                              case[1][0]), cases.items())))
    for name, (ranks, done) in found.items():
        assert done.returncode == 0, (name, done.stderr[-3000:])
        # Lightning's auto-requeue handler (signal_connector's _HandlersCompose) would call scontrol
        assert all(r["usr1_type"] == "function" and "signal_connector" not in r["usr1"] for r in ranks), ranks
        assert {r["strategy"] for r in ranks} == {"DDPStrategy"}, (name, ranks)
    shown = {name: [(r["env"], r["world"], r["nodes"], r["devices"], r["rank"]) for r in ranks]
             for name, (ranks, _) in found.items()}
    assert shown["srun"] == [("SLURMEnvironment", 2, 2, 1, 0)]
    assert shown["blaunch"] == [("LightningEnvironment", 2, 2, 1, 1)]
    assert sorted(shown["one host"]) == [("LightningEnvironment", 2, 1, 2, 0), ("LightningEnvironment", 2, 1, 2, 1)]
    assert shown["its own"] == [("SLURMEnvironment", 2, 1, 1, 0)]  # num_nodes: the script's 1, not the job's 2


def test_standalone_runs_one_rank_without_the_launchers_variables(tmp_path):
    script = """
        import json, os, sys
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
                "MASTER_PORT", "PL_TRAINER_DEVICES", "CT_RUN_DIR", "CT_CHECKPOINT_DIR")
        sys.stdout.write(json.dumps({"set": sorted(k for k in keys if k in os.environ)}) + "\\n")
        """
    for shape in ({**SLURM_2X1, "CT_NODES": "1", "SLURM_NTASKS": "1"}, {**ONE_HOST_2, "CT_RANKS_PER_NODE": "1"}):
        ranks, done = command(tmp_path, script, shape, standalone=True)
        assert done.returncode == 0, done.stderr
        assert ranks == [{"set": ["CT_CHECKPOINT_DIR", "CT_RUN_DIR"]}], (shape["CT_LAUNCH"], ranks)
        assert "[cluster-train] standalone, on host" in done.stdout


def test_standalone_is_refused_for_more_than_one_rank_and_for_a_task(store, tmp_path):
    (tmp_path / "train.py").write_text("print('training')\n")
    said = refused(run_cluster("ci-slurm", "n2_gpu1", "--standalone", "--dry-run", "--", "python", "train.py",
                               cwd=tmp_path), "profile 'n2_gpu1' starts 2 ranks; drop --standalone")
    assert len(said.strip().splitlines()) == 1
    refused(run_cluster("local", "cpu_1proc", "demo", "--standalone", "--dry-run"), "a registered task always")
    done = run_cluster("ci-slurm", "n1_gpu1", "--standalone", "--dry-run", "--", "python", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
