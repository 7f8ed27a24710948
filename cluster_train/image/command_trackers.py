"""`tracker:` for a run of your own code (`command:`): the trackers' own environment variables, so that your code's
clients (`wandb.init()`, `mlflow.start_run()`, Lightning's loggers given them) continue one tracked run across the
run's segments, as the image's tasks do (cluster_train/image/trackers.py). Torch-free: the launcher
(cluster_train/image/command.py) sets them.

Only rank 0 gets them (your other ranks should not log); the others lose the trackers' credentials. MLflow's run id
is the server's to give, so the launcher creates the run once (kept in trackers.json) and hands each later segment
the same MLFLOW_RUN_ID; W&B's is derived from the run (WANDB_RUN_ID, WANDB_RESUME=allow).
"""
import os
import socket
from pathlib import Path
from typing import Dict

from cluster_train.shared import config as cfg
from cluster_train.shared import tracker_identity as tracked
from cluster_train.shared import wandb_offline
from cluster_train.shared.errors import UserError
from cluster_train.shared.tracker_config import CREDENTIALS


def for_rank(run: cfg.RunConfig, run_dir: Path, env: Dict[str, str]) -> Dict[str, str]:
    """A rank's environment (env["RANK"]): rank 0's with the trackers' variables, the others' without the trackers'
    credentials the job forwarded. Unchanged for a run that names neither mlflow nor wandb."""
    if not {"mlflow", "wandb"} & set(run.tracker.use):
        return env
    if env.get("RANK") != "0":
        return {name: value for name, value in env.items() if not any(name in n for n in CREDENTIALS.values())}
    env = dict(env)
    if "wandb" in run.tracker.use:
        env.update(wandb_environment(run, run_dir))
    if "mlflow" in run.tracker.use:
        try:
            env.update(mlflow_environment(run, run_dir))
        except Exception as err:  # MlflowException, or the connection's own after the client's retries
            raise UserError(f"tracker mlflow: {tracked.mlflow_uri(run, run_dir)} did not answer from "
                            f"{socket.gethostname()} ({str(err).splitlines()[0][:200]}); set tracker.offline: true "
                            "where the nodes cannot reach it, and `run-cluster sync` afterwards") from None
    return env


def wandb_environment(run: cfg.RunConfig, run_dir: Path) -> Dict[str, str]:
    run_id = tracked.wandb_id(run_dir, "")
    if run.tracker.offline:  # a segment that ended in the launcher's exec left its own directory
        wandb_offline.fold(run_dir / "wandb", run_id)
    tracked.write_state(run_dir, "wandb", {"id": run_id, "offline": bool(run.tracker.offline),
                                           "project": run.tracker.experiment or run.name})
    env = {"WANDB_RUN_ID": run_id, "WANDB_RESUME": "allow", "WANDB_PROJECT": run.tracker.experiment or run.name,
           "WANDB_NAME": tracked.run_name(run_dir, ""), "WANDB_DIR": str(run_dir)}
    if run.tracker.wandb_entity:
        env["WANDB_ENTITY"] = run.tracker.wandb_entity
    if run.tracker.offline:
        env["WANDB_MODE"] = "offline"
    return env


def mlflow_environment(run: cfg.RunConfig, run_dir: Path) -> Dict[str, str]:
    """The run created on the first segment (its identity as tags), continued by every later one."""
    from mlflow.tracking import MlflowClient

    uri, experiment = tracked.mlflow_uri(run, run_dir), run.tracker.experiment or run.name
    client = MlflowClient(uri)
    saved = tracked.read_state(run_dir).get("mlflow", {})
    run_id = saved.get("run_id") if saved.get("tracking_uri") == uri else None  # a run in another store is not ours
    if run_id is None:
        found = client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else client.create_experiment(experiment)
        run_id = client.create_run(experiment_id, run_name=tracked.run_name(run_dir, ""),
                                   tags=tracked.mlflow_user()).info.run_id
        tracked.write_state(run_dir, "mlflow", {"run_id": run_id, "tracking_uri": uri, "experiment_id": experiment_id})
    tracked.mark_mlflow_segment(client, run_id, run_dir, tracked.segment_event(None), saved.get("run_id") == run_id)
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": experiment, "MLFLOW_RUN_ID": run_id}
    if uri.startswith("file:"):
        env["MLFLOW_ALLOW_FILE_STORE"] = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "true")
    return env
