"""What plain PyTorch expects of a launcher, from whichever launcher started this process: RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK (and GROUP_RANK, torchelastic's name for it), MASTER_ADDR, MASTER_PORT.

One mapping per launch shape, as submitit's JobEnvironment keeps one per scheduler. The job script exports
CT_LAUNCH, CT_NODES and CT_RANKS_PER_NODE; srun gives each task SLURM_PROCID/SLURM_LOCALID/SLURM_NODEID, the LSF
script gives each blaunch task CT_GLOBAL_RANK/CT_LOCAL_RANK/CT_NODE_RANK, and the shapes that start one process per
node (local, LSF on one host) leave the ranks to cluster_train/image/command.py, which starts them as torchrun would.
An unmodified Lightning Trainer gets the job's shape too (lightning_env), and every Python process of the command the
SIGUSR1 handler of pyhook/sitecustomize.py (python_hook_env). Imports no torch: it runs before the user's code.
"""
import os
from typing import Dict, Mapping

# launch -> (global rank, local rank, node rank) variables its tasks carry
PER_TASK = {"srun": ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"),
            "blaunch": ("CT_GLOBAL_RANK", "CT_LOCAL_RANK", "CT_NODE_RANK")}
# what a launcher sets, and a standalone command (torchrun's --standalone) runs without
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
                 "MASTER_PORT")
HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyhook")


def starts_ranks_itself(environ: Mapping[str, str]) -> bool:
    """A shape whose scheduler starts one process per node: the command's runner starts the ranks."""
    return environ.get("CT_LAUNCH", "lightning") not in PER_TASK


def shape(environ: Mapping[str, str]):
    nodes = int(environ.get("CT_NODES", "1"))
    per_node = int(environ.get("CT_RANKS_PER_NODE", "1"))
    return nodes, per_node


def task_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables for this task, started by srun or blaunch (one task per rank)."""
    nodes, per_node = shape(environ)
    rank, local, node = (int(environ[name]) for name in PER_TASK[environ["CT_LAUNCH"]])
    return rank_env(rank, local, node, nodes, per_node, environ["MASTER_ADDR"], environ["MASTER_PORT"])


def local_rank_env(environ: Mapping[str, str], local: int, port: int) -> Dict[str, str]:
    """The variables for rank `local` of a one-host job whose ranks the runner starts (on a port free here)."""
    _, per_node = shape(environ)
    return rank_env(local, local, 0, 1, per_node, "127.0.0.1", port)


def rank_env(rank: int, local: int, node: int, nodes: int, per_node: int, addr: str, port: str) -> Dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(nodes * per_node), "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(per_node), "NODE_RANK": str(node), "GROUP_RANK": str(node),
            "MASTER_ADDR": addr, "MASTER_PORT": str(port)}


def lightning_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """Defaults for a Lightning Trainer the script builds without devices, num_nodes or strategy: Trainer reads
    PL_TRAINER_<ARGUMENT> for every argument it is not given (pytorch_lightning/utilities/argparse.py,
    _defaults_from_env_vars; lightning.pytorch alike). Without them Trainer() under N ranks trains N separate models,
    each on its own. An argument the script passes still wins; a PL_TRAINER_ variable already set (a profile's env:)
    is kept. The accelerator stays Lightning's choice ("auto": the GPUs where there are any)."""
    nodes, per_node = shape(environ)
    wanted = {"PL_TRAINER_NUM_NODES": str(nodes), "PL_TRAINER_DEVICES": str(per_node)}
    if nodes * per_node > 1:
        wanted["PL_TRAINER_STRATEGY"] = "ddp"  # one process per rank, started by the job (not spawned by Lightning)
    return {name: value for name, value in wanted.items() if name not in environ}


def python_hook_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """PYTHONPATH with pyhook/ first (the user's own entries after it): Lightning's auto-requeue stays off."""
    path = environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": HOOK_DIR + (os.pathsep + path if path else "")}


def standalone_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """The environment without the launcher's variables, as `python train.py` on one machine has it."""
    return {name: value for name, value in environ.items() if name not in LAUNCHER_VARS}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_env(environ: Mapping[str, str], run_dir: str) -> Dict[str, str]:
    """Where the run keeps its checkpoints and whether this allocation continues an earlier one (README)."""
    from cluster_train.shared.exit_codes import REQUEUE

    segment = int(environ.get("CT_SEGMENT", "1") or 1)
    return {"CT_RUN_DIR": run_dir, "CT_CHECKPOINT_DIR": os.path.join(run_dir, "checkpoints"),
            "CT_RESUMED": "1" if segment > 1 else "0", "CT_REQUEUE_EXIT": str(REQUEUE)}
