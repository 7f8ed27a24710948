"""Your own training code under run-cluster, on the host: the code snapshot, the `reads:` mapping and its refusals
(seeds 003 and 004's mistakes in their own configs), the variables every launch shape gives plain PyTorch, and the
runner that starts a one-host job's ranks. The jobs themselves run in tests/cluster/test_user_code_jobs.py."""
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT
from host.test_preflight import refused, run_cluster

from cluster_train.host.jobs import code_snapshot
from cluster_train.image.launch_env import local_rank_env, task_env

LIGHTNING = ROOT / "examples" / "lightning_smart"


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def project(tmp_path, config="", reads=None, command=None):
    """A user's project: train.py, a YAML config, an experiment file naming them."""
    code = tmp_path / "proj"
    (code / "configs").mkdir(parents=True)
    (code / "train.py").write_text("print('training')\n")
    (code / "configs" / "x.yaml").write_text(textwrap.dedent(config))
    experiment = {"name": "proj", "command": command or ["python", "train.py", "--config", "configs/x.yaml"],
                  "code": ".", "data": {"rank_mem_gb": 4, "worker_mem_gb": 10}}
    if reads is not None:
        experiment["reads"] = reads
    (code / "experiment.yaml").write_text(json.dumps(experiment))
    return code


READS = {"devices": "Trainer.devices", "num_nodes": "Trainer.num_nodes", "num_workers": "Dataset.num_workers",
         "batch_size": "Dataset.train_batch_size", "accumulate_grad_batches": "Trainer.accumulate_grad_batches"}


# --- the snapshot -------------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def own_temp_dir(tmp_path, monkeypatch):
    """Snapshots are made in the temporary directory until queued: this test's own, checked empty at the end."""
    temp = tmp_path / "snapshots"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    yield
    assert not list(temp.iterdir())


def test_snapshot_holds_tracked_and_uncommitted_files_not_ignored_ones(tmp_path):
    code = tmp_path / "repo"
    code.mkdir()
    (code / ".gitignore").write_text("data/\n")
    (code / "a.py").write_text("committed\n")
    (code / "gone.py").write_text("deleted later\n")
    git(code, "init", "-q")
    git(code, "add", ".")
    git(code, "commit", "-qm", "init")
    (code / "a.py").write_text("changed, not committed\n")
    (code / "new.py").write_text("untracked\n")
    (code / "data").mkdir()
    (code / "data" / "big.bin").write_text("ignored\n")
    (code / "gone.py").unlink()
    snap = code_snapshot.take(code)
    with tarfile.open(snap.tar_path) as tar:
        assert sorted(tar.getnames()) == [".gitignore", "a.py", "new.py"]
        assert tar.extractfile("a.py").read() == b"changed, not committed\n"
    assert snap.git_dirty and len(snap.git_commit) == 40 and snap.files == 3
    again = code_snapshot.take(code)
    code_snapshot.discard(again)
    assert again.sha256 == snap.sha256  # the same content, the same name
    (code / "a.py").write_text("edited after submission\n")
    edited = code_snapshot.take(code)
    code_snapshot.discard(edited)
    assert edited.sha256 != snap.sha256
    with tarfile.open(snap.tar_path) as tar:
        assert tar.extractfile("a.py").read() == b"changed, not committed\n"  # the snapshot did not move
    code_snapshot.discard(snap)
    assert not Path(snap.tar_path).exists()


def test_snapshot_of_a_plain_directory_and_its_limits(tmp_path, monkeypatch):
    code = tmp_path / "plain"
    (code / "__pycache__").mkdir(parents=True)
    (code / "train.py").write_text("x\n")
    (code / "__pycache__" / "train.cpython-313.pyc").write_bytes(b"\0")
    snap = code_snapshot.take(code)
    code_snapshot.discard(snap)
    assert snap.git_commit is None and snap.files == 1
    monkeypatch.setattr(code_snapshot, "MAX_BYTES", 1)
    with pytest.raises(Exception, match=r"keep data and checkpoints out of the code"):
        code_snapshot.take(code)


def test_a_root_home_or_huge_directory_is_refused_before_it_is_walked(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "proj").mkdir(parents=True)
    for source, fragment in ((Path("/"), "code: / is the file system's root, not a project"),
                             (tmp_path / "home", "is a home directory, not a project"),
                             (tmp_path, "is a home directory, not a project")):  # above one: holds it all
        with pytest.raises(Exception, match=f"{fragment}.*at most 20000 files, 200 MB.*cd into your project"):
            code_snapshot.take(source)
    (tmp_path / "home" / "proj" / "a.py").write_text("a\n")
    (tmp_path / "home" / "proj" / "b.py").write_text("b\n")
    monkeypatch.setattr(code_snapshot, "MAX_FILES", 1)
    with pytest.raises(Exception, match="holds more than 1 files; a run snapshots code, not data"):
        code_snapshot.take(tmp_path / "home" / "proj")


def test_a_file_gone_between_listing_and_snapshot_is_one_line(tmp_path, monkeypatch):
    code = tmp_path / "proj"
    code.mkdir()
    (code / "a.py").write_text("a\n")
    monkeypatch.setattr(code_snapshot, "project_files", lambda source: ["a.py", "gone.py"])  # as /proc's files go
    with pytest.raises(Exception, match=f"code: {code}/gone.py could not be read into the snapshot"):
        code_snapshot.take(code)


def test_a_command_typed_in_the_root_directory_is_refused_in_one_line(store):
    said = refused(run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", cwd="/"),
                   "code: / is the file system's root, not a project")
    assert len(said.strip().splitlines()) == 1  # was a FileNotFoundError traceback from /proc


# --- reads: and preflight -----------------------------------------------------------------------------------------

def test_seed_003_devices_8_on_one_gpu_per_node_is_refused(store, tmp_path):
    code = project(tmp_path, "Trainer: {devices: 8, num_nodes: 1}\nDataset: {num_workers: 2, train_batch_size: 22}\n",
                   READS)
    refused(run_cluster("torch-hpc", "gpu1", str(code / "experiment.yaml"), "--dry-run"),
            "Trainer.devices in configs/x.yaml is 8 but profile 'gpu1' starts 1 rank(s) per node",
            "set Trainer.devices: 1 there")


def test_seed_003_eight_workers_times_four_ranks_exhaust_host_ram(store, tmp_path):
    config = "Trainer: {devices: 4, num_nodes: 4}\nDataset: {num_workers: 8, train_batch_size: 22}\n"
    done = refused(run_cluster("torch-hpc", "l40s_4x4", str(project(tmp_path, config, READS) / "experiment.yaml"),
                               "--dry-run"), "host RAM: 4 rank(s) per node x (4 GB + 8 dataloader workers x 10 GB)",
                   "set Dataset.num_workers=5 or fewer", "(in configs/x.yaml)")
    assert len(done.strip().splitlines()) == 1


def test_seed_004_sixty_four_workers_on_sixteen_cpus_is_refused(store):
    done = refused(run_cluster("gilbreth", "single_node_4gpu", str(LIGHTNING / "experiment.yaml"), "--dry-run"),
                   "Dataset.num_workers=64 dataloader workers per rank but each rank has 16 CPU(s)",
                   "set Dataset.num_workers=16 or fewer")
    assert len(done.strip().splitlines()) == 1


def test_the_summary_shows_the_effective_batch_from_the_users_numbers(store, tmp_path):
    config = ("Trainer: {devices: 4, num_nodes: 4, accumulate_grad_batches: 2}\n"
              "Dataset: {num_workers: 2, train_batch_size: 22}\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = run_cluster("torch-hpc", "l40s_4x4", str(project(tmp_path, config, READS) / "experiment.yaml"), "--dry-run",
                       env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode == 0, done.stderr
    assert "batch: 22 per rank x 16 rank(s) x 2 accumulation = 704 effective" in done.stdout
    assert "command: python train.py --config configs/x.yaml" in done.stdout
    assert "not checked" not in done.stdout
    assert "python -m train command --config" in done.stdout  # the image runs the command, not a task
    assert not list(temp.glob("ct-code-*"))  # a dry run leaves no snapshot behind (jinja's cache may be there)


def test_without_reads_the_command_runs_and_the_summary_says_what_was_not_checked(store, tmp_path):
    done = run_cluster("torch-hpc", "l40s_4x4", str(project(tmp_path, "Trainer: {devices: 8}\n") / "experiment.yaml"),
                       "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "not checked (no reads: mapping): devices against the profile's GPUs per node" in done.stdout
    assert "batch: not known to cluster-train" in done.stdout


@pytest.mark.parametrize("experiment, fragment", [
    ({"reads": {"gpus": "Trainer.devices"}}, "unknown reads key 'gpus'"),
    ({"reads": {"devices": "Trainer.devices", "file": "configs/none.yaml"}},
     "reads.file: configs/none.yaml is not a file"),
    ({"model": {"name": "resnet_cifar"}}, "the experiment names a command and also model"),
    ({"code": "no/such/dir"}, "is not a directory; set code:"),
    ({"command": "python train.py"}, "config key 'command' = 'python train.py' must be a list"),
])
def test_bad_command_experiments_are_refused_with_one_line(store, tmp_path, experiment, fragment):
    code = project(tmp_path, "Trainer: {devices: 1}\n")
    path = code / "experiment.yaml"
    path.write_text(json.dumps({**json.loads(path.read_text()), **experiment}))
    refused(run_cluster("torch-hpc", "gpu1", str(path), "--dry-run"), fragment)


def test_a_set_over_a_key_the_code_reads_itself_says_where_to_change_it(store, tmp_path):
    code = project(tmp_path, "Dataset: {num_workers: 2}\n", {"num_workers": "Dataset.num_workers"})
    refused(run_cluster("torch-hpc", "gpu1", str(code / "experiment.yaml"), "--set", "data.num_workers=4", "--dry-run"),
            "--set data.num_workers: your code reads Dataset.num_workers in configs/x.yaml, not cluster-train's")


def test_a_non_number_where_reads_expects_one_names_the_users_key(store, tmp_path):
    code = project(tmp_path, "Trainer: {devices: four}\n", {"devices": "Trainer.devices"})
    refused(run_cluster("torch-hpc", "gpu1", str(code / "experiment.yaml"), "--dry-run"),
            "Trainer.devices in configs/x.yaml = 'four': cluster-train reads it as devices, "
            "which must be a whole number")


def test_a_command_typed_after_the_separator_runs_the_working_directory(store, tmp_path):
    code = project(tmp_path)
    done = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", "--dry-run", cwd=code)
    assert done.returncode == 0, done.stderr
    assert f"code: {code} (not a git work tree)" in done.stdout
    assert "command: python train.py --dry-run" in done.stdout  # after --, everything is the command's
    assert "--job-name" not in done.stdout and "run dir:" in done.stdout
    refused(run_cluster("local", "cpu_1proc", "--"), "nothing after --")


def test_a_script_missing_from_the_snapshot_is_refused_and_arguments_are_shown_quoted(store, tmp_path):
    code = project(tmp_path)
    said = refused(run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "nosuch.py", cwd=code),
                   f"command: nosuch.py is not a file of the code snapshot of {code} (3 file(s)); fix its name")
    assert len(said.strip().splitlines()) == 1
    refused(run_cluster("local", "cpu_1proc", "--dry-run", "--", "./run.sh", cwd=code), "command: ./run.sh is not")
    done = run_cluster("local", "cpu_1proc", "--dry-run", "--", "python", "train.py", "--note", "a\nb", "it's",
                       cwd=code)
    assert done.returncode == 0, done.stderr
    assert "command: python train.py --note $'a\\nb' 'it'\"'\"'s'\n" in done.stdout  # one line, as a shell takes it


def test_dev_runs_the_task_from_a_snapshot_of_this_checkout(store):
    done = run_cluster("local", "cpu_1proc", "demo", "--dev", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"code: {ROOT}/cluster_train/" in done.stdout and "dev: the tasks run from this snapshot" in done.stdout
    assert "export PYTHONPATH=" in done.stdout and "python -m train fit --config" in done.stdout
    refused(run_cluster("local", "cpu_1proc", "demo", "--dev", "--dry-run", "--", "python", "x.py"), "drop --dev")


# --- what each launch shape gives plain PyTorch --------------------------------------------------------------------

EXPECTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def test_srun_and_blaunch_tasks_map_to_the_same_variables():
    shape = {"CT_NODES": "2", "CT_RANKS_PER_NODE": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "20001"}
    srun = task_env({**shape, "CT_LAUNCH": "srun", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"})
    blaunch = task_env({**shape, "CT_LAUNCH": "blaunch", "CT_GLOBAL_RANK": "3", "CT_LOCAL_RANK": "1",
                        "CT_NODE_RANK": "1"})
    assert srun == blaunch == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                               "NODE_RANK": "1", "GROUP_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "20001"}
    one_host = local_rank_env({"CT_LAUNCH": "lightning", "CT_NODES": "1", "CT_RANKS_PER_NODE": "2"}, 1, 29500)
    assert set(EXPECTED) <= set(one_host) and one_host["RANK"] == "1" and one_host["WORLD_SIZE"] == "2"


def runner(tmp_path, script, ranks=2, env=(), **config):
    """`python -m train command` on the host for a one-host job: a run directory with config.yaml (and `config`'s
    keys) and code/; the job's environment and `env`. Again on the same tmp_path: the run's next segment."""
    run_dir = tmp_path / "run"
    (run_dir / "code").mkdir(parents=True, exist_ok=True)
    (run_dir / "code" / "rank.py").write_text(textwrap.dedent(script))
    (run_dir / "config.yaml").write_text(json.dumps({"command": [sys.executable, "rank.py"], "code": str(tmp_path),
                                                     **config}))
    env = {**os.environ, **dict(env), "CT_LAUNCH": "lightning", "CT_NODES": "1", "CT_RANKS_PER_NODE": str(ranks),
           "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "train", "command", "--config", str(run_dir / "config.yaml")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), run_dir


def test_the_runner_starts_one_rank_per_gpu_with_what_torch_reads(tmp_path):
    proc, run_dir = runner(tmp_path, """
        import json, os, sys
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                "CT_CHECKPOINT_DIR", "CT_RESUMED", "CT_REQUEUE_EXIT")
        sys.stdout.write(json.dumps({k: os.environ[k] for k in keys}) + "\\n")  # one write: the ranks share stdout
        """)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    ranks = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(r["RANK"] for r in ranks) == ["0", "1"] and {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert len({r["MASTER_PORT"] for r in ranks}) == 1
    assert ranks[0]["CT_CHECKPOINT_DIR"] == str(run_dir / "checkpoints") and ranks[0]["CT_RESUMED"] == "0"
    assert (run_dir / "checkpoints").is_dir()


def test_the_runner_forwards_the_warning_signal_and_reports_the_requeue(tmp_path):
    proc, _ = runner(tmp_path, """
        import os, signal, sys, time
        signal.signal(signal.SIGUSR1, lambda *_: sys.exit(int(os.environ["CT_REQUEUE_EXIT"])))
        sys.stdout.write("ready\\n")
        sys.stdout.flush()
        time.sleep(60)
        """)
    lines = [proc.stdout.readline() for _ in range(4)]  # two announcements, two ranks ready, in any order
    assert (sorted(lines)[-2:] == ["ready\n", "ready\n"]
            and sum(x.startswith("[cluster-train] rank") for x in lines) == 2)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(30) == 75


def test_when_one_rank_fails_the_runner_ends_the_others(tmp_path):
    start = time.monotonic()
    proc, _ = runner(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(7)
        time.sleep(60)
        """)
    assert proc.wait(45) == 7 and time.monotonic() - start < 30
