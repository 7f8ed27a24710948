"""Lightning cluster environment for plain LSF jobs launched with `blaunch` (DTU and most university clusters).

Lightning's own LSFEnvironment only detects IBM's jsrun (JSM_NAMESPACE_*, LSB_DJOB_RANKFILE), so blaunch jobs would
each train alone. The job script (cluster_train/host/schedulers/templates/lsf.sh.j2) starts one task
per rank and exports CT_GLOBAL_RANK, CT_LOCAL_RANK, CT_NODE_RANK and CT_WORLD_SIZE; the hosts come
from LSF's own host file, LSB_DJOB_HOSTFILE.
"""
import os

from pytorch_lightning.plugins.environments import ClusterEnvironment

from cluster_train.shared.ports import master_port


class LSFHostfileEnvironment(ClusterEnvironment):
    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR") or self.hosts()[0]

    @property
    def main_port(self) -> int:
        return int(os.environ.get("MASTER_PORT") or master_port(int(os.environ["LSB_JOBID"])))

    @staticmethod
    def detect() -> bool:
        return os.environ.get("CT_LAUNCH") == "blaunch" and "LSB_DJOB_HOSTFILE" in os.environ

    @staticmethod
    def hosts() -> list:
        with open(os.environ["LSB_DJOB_HOSTFILE"]) as f:
            return list(dict.fromkeys(line.split()[0] for line in f if line.strip()))

    def world_size(self) -> int:
        return int(os.environ["CT_WORLD_SIZE"])

    def set_world_size(self, size: int) -> None:
        pass  # fixed by the job script

    def global_rank(self) -> int:
        return int(os.environ["CT_GLOBAL_RANK"])

    def set_global_rank(self, rank: int) -> None:
        pass  # fixed by the job script

    def local_rank(self) -> int:
        return int(os.environ["CT_LOCAL_RANK"])

    def node_rank(self) -> int:
        return int(os.environ["CT_NODE_RANK"])
