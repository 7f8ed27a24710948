"""Experiment trackers (cluster_train/image/trackers.py): `tracker:` resolved once and checked on the host; a run
resumed from its checkpoint continues the same MLflow run on a real tracking server (conftest.mlflow_server, SQLite) at
the step it stopped, with its identity as tags and its config as parameters. The requeued training on the test Slurm
cluster (tests/cluster/test_long_runs.py) proves the same through the job script, with W&B offline and a canary
credential."""
import json
import os
import shutil
import subprocess

import pytest
from conftest import ROOT

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError

COMMON = {"optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.0},
          "model": {"name": "resnet_cifar", "params": {"depth": 8, "width": 4}},
          "trainer": {"max_epochs": 1, "strategy": "single", "accelerator": "cpu", "limit_train_batches": 4,
                      "limit_val_batches": 1, "log_every_n_steps": 1, "export_weights": False}}
# what sync reads of a run's manifest.json, as every command that takes a run does (cluster_train/host/runs)
MANIFEST = {"run_id": "tracked", "cluster_file": "clusters/ci-slurm.yaml", "profile": "n1_gpu1",
            "image": {"sha256": "ab" * 32}, "scheduler": {"name": "slurm", "job_id": "1"}}


@pytest.mark.parametrize("raw, use", [
    ({}, ["tensorboard"]), ({"tracker": "mlflow"}, ["mlflow"]), ({"tracker": ["mlflow", "wandb"]}, ["mlflow", "wandb"]),
    ({"tracker": {"use": "tensorboard,wandb", "offline": True}}, ["tensorboard", "wandb"])])
def test_every_spelling_of_tracker_resolves_to_one_typed_config(raw, use):
    assert cfg.resolve(raw).tracker.use == use
    assert cfg.resolve({}, [f"tracker.use={','.join(use)}"]).tracker.use == use  # --set says the same


@pytest.mark.parametrize("tracker, message", [
    ("mlfow", r"unknown tracker 'mlfow' \(did you mean 'mlflow'\?\)"),
    ({"use": ["mlflow"], "mlflow_uri": "http://me:secret@mlflow.example.org"}, "MLFLOW_TRACKING_PASSWORD"),
    ({"use": ["mlflow"], "mlflow_uri": "mlflow.example.org:5000"}, "must start with one of http"),
    ({"use": ["mlflow"], "mlflow_uri": "http://"}, "names no host"),
    ({"use": ["mlflow"], "offline": "sometimes"}, "tracker.offline"),
])
def test_a_bad_tracker_is_refused_in_one_line_naming_it(tracker, message):
    with pytest.raises(UserError, match=message) as refused:
        cfg.resolve({"tracker": tracker})
    assert "secret" not in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.slow
@pytest.mark.parametrize("offline", [False, True])
def test_a_resumed_run_continues_the_same_mlflow_run_at_its_step(mlflow_server, demo_data, tmp_path, monkeypatch,
                                                                 offline):
    """Online: each segment logs to the server. Offline: to the run directory's file store, then `sync` sends it."""
    pytest.importorskip("torch")
    from conftest import mlflow_up
    from mlflow.tracking import MlflowClient

    from cluster_train.image.fit import fit
    from cluster_train.host.runs import tracker_sync as sync

    mlflow_up(mlflow_server)

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER_CANARY)  # the server has no auth: it is sent and ignored
    monkeypatch.setenv("CT_IMAGE_SHA256", "ab" * 32)
    (tmp_path / "manifest.json").write_text(json.dumps({**MANIFEST, "cluster": "ci-slurm", "git": {
        "commit": "c0ffee", "dirty": False}, "data": {"sha256": "da" * 32}}))
    monkeypatch.setenv("CT_RUN_DIR", str(tmp_path))
    raw = dict(COMMON, name=f"tracked_demo_{offline}", output_dir=str(tmp_path), data={"root": str(demo_data),
               "batch_size": 32, "num_workers": 0}, tracker={"use": ["mlflow"], "mlflow_uri": mlflow_server,
                                                             "offline": offline})
    for segment, epochs in ((1, 1), (2, 2)):  # the second resumes from the first's last.ckpt
        monkeypatch.setenv("CT_SEGMENT", str(segment))
        fit(cfg.resolve(raw, {"trainer.max_epochs": epochs}))
        cfg.dump(cfg.resolve(raw), tmp_path / "config.yaml")  # as run-cluster writes it
    if offline:
        assert sync.status_lines(tmp_path)[0].endswith(f"not synced: run-cluster sync {tmp_path}")
        assert sync.main([str(tmp_path)]) == 0
        assert "synced 20" in sync.status_lines(tmp_path)[0]
        assert sync.sync_dir(tmp_path)[0].endswith(", 0 new metric point(s)")  # again: nothing twice
    client = MlflowClient(mlflow_server)
    (experiment,) = [e for e in client.search_experiments() if e.name == f"tracked_demo_{offline}"]
    (run,) = client.search_runs([experiment.experiment_id])
    kept = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]["run_id"]
    assert kept == run.info.run_id or offline and (tmp_path / "mlruns").is_dir()
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(1, 9)) or steps == list(range(0, 8)), steps  # 4 steps an epoch, none twice
    epochs = sorted({m.step for m in client.get_metric_history(run.info.run_id, "val/loss")})
    assert 4 in epochs and 8 in epochs, epochs
    tags, params = run.data.tags, run.data.params
    assert tags["ct.image_sha256"] == "ab" * 32 and tags["ct.data_sha256"] == "da" * 32
    assert tags["ct.code_commit"] == "c0ffee" and tags["ct.run_id"] == "tracked"
    assert {"ct.segment.1", "ct.segment.2"} <= set(tags) and json.loads(tags["ct.segment.2"])["step"] == 4
    assert params["trainer/max_epochs"] == "1" and params["model/name"] == "resnet_cifar"
    assert run.info.status == "FINISHED"
    assert tags["mlflow.user"] != USER_CANARY and run.info.user_id != USER_CANARY  # the server's copy
    no_credential_under(tmp_path)


USER_CANARY = "canary-user-5e2b"  # MLFLOW_TRACKING_USERNAME: a credential, as MLFLOW_TRACKING_TOKEN is


def no_credential_under(run_dir) -> None:
    """No file of the run directory (its MLflow file store's tags and meta.yaml included) holds the canary."""
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and USER_CANARY.encode() in p.read_bytes()]
    assert not leaked, leaked


def test_settings_then_experiment_then_profile_then_set_each_key_over_the_last(monkeypatch):
    from types import SimpleNamespace

    from cluster_train.host.jobs.resolve import tracker_layers

    profile = SimpleNamespace(name="offline_nodes", tracker={"offline": True})
    raw = tracker_layers({"tracker": {"use": ["mlflow"], "experiment": "mine"}}, "wandb", profile)
    assert raw["tracker"] == {"use": ["mlflow"], "experiment": "mine", "offline": True}
    assert cfg.resolve(raw, ["tracker.offline=false"]).tracker.offline is False  # --set wins
    assert tracker_layers({}, None, SimpleNamespace(name="p", tracker={})) == {}  # nothing set: the default
    with pytest.raises(UserError, match="tracker in your settings is 3"):
        tracker_layers({}, 3, profile)


def test_the_job_forwards_credentials_by_name_never_their_values(runs_dir, tmp_path):
    import os

    from conftest import run_cluster

    env = {**os.environ, "WANDB_API_KEY": "canary-wandb-0000", "MLFLOW_TRACKING_TOKEN": "canary-mlflow-0000"}
    demo = ["ci-slurm", "n1_gpu1", "demo", "--set", f"data.root={tmp_path}", "--dry-run"]
    tracked = run_cluster(*demo, "--set", "tracker=[mlflow, wandb]", env=env)
    assert tracked.returncode == 0, tracked.stderr
    assert "|MLFLOW_TRACKING_TOKEN|MLFLOW_TRACKING_USERNAME|MLFLOW_TRACKING_PASSWORD|WANDB_API_KEY)" in tracked.stdout
    plain = run_cluster(*demo, env=env)
    assert "WANDB_API_KEY" not in plain.stdout and "MLFLOW" not in plain.stdout  # a run without trackers: none
    assert "canary" not in tracked.stdout + tracked.stderr + plain.stdout + plain.stderr


def test_status_says_where_each_tracked_run_logs_and_whether_it_is_synced(tmp_path):
    from cluster_train.host.runs import tracker_sync as sync

    (tmp_path / "config.yaml").write_text("tracker: {use: [mlflow, wandb], mlflow_uri: 'http://mlflow.example.org'}\n")
    (tmp_path / "trackers.json").write_text(json.dumps({
        "mlflow": {"run_id": "abc", "tracking_uri": (tmp_path / "mlruns").as_uri()},
        "wandb": {"id": "w1", "project": "demo", "offline": True}}))
    lines = sync.status_lines(tmp_path)
    store = (tmp_path / "mlruns").as_uri()
    assert lines[0] == f"tracker mlflow: run abc ({store}), not synced: run-cluster sync {tmp_path}"
    assert lines[1] == f"tracker wandb: run w1 (W&B project demo), not synced: run-cluster sync {tmp_path}"
    (tmp_path / "config.yaml").write_text("tracker: {use: [mlflow]}\n")  # the run directory's store is the tracker
    (tmp_path / "trackers.json").write_text(json.dumps({"mlflow": {"run_id": "abc", "tracking_uri": "file:///x"}}))
    assert sync.status_lines(tmp_path) == ["tracker mlflow: run abc (file:///x), in the run directory"]
    assert sync.sync_dir(tmp_path) == ["mlflow: kept in file:///x (no tracker.mlflow_uri to upload to)"]
    (tmp_path / "untracked").mkdir()
    (tmp_path / "untracked" / "manifest.json").write_text(json.dumps(MANIFEST))  # a run whose trackers logged nothing
    with pytest.raises(UserError, match="logged nothing offline"):
        sync.main([str(tmp_path / "untracked")])
    with pytest.raises(UserError, match="has no manifest.json"):
        sync.main([str(tmp_path / "nothing")])


def test_sync_with_a_python_that_lacks_the_tracker_clients_says_which_one_has_them(tmp_path):
    """bin/run-cluster runs on whatever python3 is first on PATH (the login node's, here pyenv's), which has neither
    client: sync says so in one line naming the checkout's Python, which has both (issue 39 item 24)."""
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin:" + os.environ["PATH"])
    if subprocess.run([python, "-c", "import mlflow"], capture_output=True).returncode == 0:
        pytest.skip(f"{python} has MLflow's client")
    for tracker, state in (("mlflow", {"run_id": "abc", "tracking_uri": (tmp_path / "mlruns").as_uri()}),
                           ("wandb", {"id": "w1", "project": "demo", "offline": True})):
        run = tmp_path / tracker
        run.mkdir()
        (run / "manifest.json").write_text(json.dumps(MANIFEST))
        (run / "config.yaml").write_text(f"tracker: {{use: [{tracker}], mlflow_uri: 'http://mlflow.example.org'}}\n")
        (run / "trackers.json").write_text(json.dumps({tracker: state}))
        done = subprocess.run([python, str(ROOT / "bin" / "run-cluster"), "sync", str(run)], capture_output=True,
                              text=True, env={**os.environ, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert f"{ROOT / '.venv' / 'bin' / 'python'} bin/run-cluster sync runs/<id>" in done.stderr, done.stderr


def test_each_model_of_a_multi_model_task_is_its_own_wandb_run(tmp_path, monkeypatch):
    """WandbLogger reuses whatever W&B run is active: the next model's logger ends the last model's run first."""
    pytest.importorskip("wandb")
    import wandb

    from cluster_train.image import trackers

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run = cfg.resolve({"output_dir": str(tmp_path), "tracker": {"use": ["wandb"], "offline": True}})
    ids = []
    for name in ("expert_0", "expert_1"):
        (logger,) = trackers.loggers(run, tmp_path, name)
        logger.log_metrics({"x": 1.0}, step=1)
        ids.append(logger.experiment.id)
    wandb.finish()
    assert ids[0] != ids[1] and ids == [trackers.wandb_id(tmp_path, name) for name in ("expert_0", "expert_1")]
    assert sorted(d.name.rsplit("-", 1)[-1] for d in (tmp_path / "wandb").glob("offline-run-*")) == sorted(
        i.rsplit("-", 1)[-1] for i in ids)


@pytest.mark.slow
def test_your_own_command_continues_one_tracked_run_through_the_trackers_variables(tmp_path, monkeypatch):
    """A `command:` run: rank 0's own mlflow.start_run() and wandb.init(), given nothing, continue the run's one
    MLflow run and one W&B id in every segment; rank 1 gets neither, nor the credentials the job forwarded."""

    from host.test_user_code import runner

    from cluster_train.shared import wandb_offline

    tracker = {"use": ["mlflow", "wandb"], "offline": True}
    for segment in ("1", "2"):
        env = {"CT_SEGMENT": segment, "WANDB_API_KEY": "c4nary" + "0" * 34, "MLFLOW_TRACKING_TOKEN": "canary-0",
               "MLFLOW_TRACKING_USERNAME": USER_CANARY}
        proc, run_dir = runner(tmp_path, OWN_CODE, env=env, name="own", tracker=tracker)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        ranks = {r["rank"]: r["has"] for r in (json.loads(line) for line in out.splitlines() if line[:1] == "{")}
        assert "MLFLOW_RUN_ID" in ranks["0"] and "WANDB_RUN_ID" in ranks["0"], ranks
        assert not {"MLFLOW_RUN_ID", "WANDB_RUN_ID", "WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN"} & set(ranks["1"])
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the run's own store, as `sync` reads it
    client = MlflowClient((run_dir / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("own").experiment_id])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1, 2]
    assert {"ct.segment.1", "ct.segment.2"} <= set(run.data.tags) and run.data.tags["ct.run_id"] == "run"
    no_credential_under(run_dir)
    folded = wandb_offline.fold(run_dir / "wandb", json.loads((run_dir / "trackers.json").read_text())["wandb"]["id"])
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1 and len(list(folded.glob("segments/*"))) == 2


OWN_CODE = """
import json, os, sys
segment = int(os.environ["CT_SEGMENT"])
has = sorted(k for k in os.environ if k.startswith(("WANDB_", "MLFLOW_")))  # before MLflow's end_run drops its own
if os.environ["RANK"] == "0":
    import mlflow, wandb
    with mlflow.start_run():  # MLFLOW_RUN_ID: the run's one MLflow run
        mlflow.log_metric("loss", 1.0 / segment, step=segment)
    run = wandb.init()
    run.log({"loss": 1.0 / segment}, step=segment)
    run.finish()
sys.stdout.write(json.dumps({"rank": os.environ["RANK"], "has": has}) + "\\n")
"""


def test_every_image_carries_both_clients_and_one_that_does_not_is_refused_before_queueing(tmp_path, monkeypatch):
    """Each flavor's lock pins mlflow-skinny and wandb (the CUDA 11.6 one: the last releases for its Python 3.8); a
    flavor whose lock lacks one (a site's own) is refused in one line naming the fix, before anything is queued."""
    from types import SimpleNamespace

    from cluster_train.host import project
    from cluster_train.host.jobs import preflight

    run = cfg.resolve({"tracker": ["mlflow", "wandb"]})
    def job(flavor):
        return SimpleNamespace(image=SimpleNamespace(flavor=flavor, parent_sha256=None))

    for flavor in ("cpu", "cuda12.8", "cuda11.6"):
        preflight.image_has_the_trackers(job(flavor), None, run)
    (tmp_path / "containers").mkdir()
    (tmp_path / "containers" / "site.lock").write_text("torch==2.6.0 \\\n    --hash=sha256:00\nmlflow-skinny==3.1\n")
    monkeypatch.setattr(project, "ROOT", tmp_path)
    with pytest.raises(UserError, match=r"^tracker wandb: the site image does not carry wandb yet; derive one") as no:
        preflight.image_has_the_trackers(job("site"), None, run)
    assert "images derive NAME --from site" in str(no.value) and "\n" not in str(no.value)


def test_your_own_command_with_an_unreachable_mlflow_server_ends_in_one_line(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from cluster_train.image.command_trackers import for_rank

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the client's own retries, minutes by default
    run = cfg.resolve({"tracker": {"use": ["mlflow"], "mlflow_uri": "http://127.0.0.1:9"}})
    with pytest.raises(UserError, match=r"^tracker mlflow: http://127.0.0.1:9 did not answer from .*tracker.offline"):
        for_rank(run, tmp_path, {"RANK": "0"})
    assert (for_rank(run, tmp_path, {"RANK": "1", "MLFLOW_TRACKING_TOKEN": "t", "PATH": "/bin"})
            == {"RANK": "1", "PATH": "/bin"})
