"""Each rank's thread count defaults to its share of the CPUs the scheduler gave (cluster_train/image/threads.py); the
user's OMP_NUM_THREADS wins. The packed 4x1 job in tests/cluster/test_launch_shapes.py counts the threads from /proc."""
import socket

import pytest

from cluster_train.image.threads import default_threads

HOST = socket.gethostname()


@pytest.mark.parametrize("environ, share", [
    ({"CT_LAUNCH": "srun", "SLURM_CPUS_PER_TASK": "4", "CT_RANKS_PER_NODE": "4"}, 4),  # one srun task per rank
    ({"CT_LAUNCH": "lightning", "SLURM_CPUS_PER_TASK": "8", "CT_RANKS_PER_NODE": "4"}, 2),  # one task, 4 ranks
    ({"CT_LAUNCH": "blaunch", "LSB_MCPU_HOSTS": f"{HOST} 8 other 8", "CT_RANKS_PER_NODE": "4"}, 2),  # host's slots
    ({"CT_LAUNCH": "lightning", "LSB_MCPU_HOSTS": f"{HOST} 3", "CT_RANKS_PER_NODE": "4"}, 1),  # at least one
    ({"CT_LAUNCH": "lightning", "CT_CPUS_PER_TASK": "2", "CT_RANKS_PER_NODE": "2"}, 1),  # local: the profile's
])
def test_a_rank_gets_its_share_of_the_tasks_cpus(environ, share):
    assert default_threads(environ) == share
    assert environ["OMP_NUM_THREADS"] == environ["MKL_NUM_THREADS"] == str(share)


def test_the_users_setting_wins_and_nothing_is_invented():
    user = {"CT_LAUNCH": "srun", "SLURM_CPUS_PER_TASK": "4", "OMP_NUM_THREADS": "16"}
    assert default_threads(user) == 16 and "MKL_NUM_THREADS" not in user
    bare = {"CT_LAUNCH": "lightning"}
    assert default_threads(bare) is None and bare == {"CT_LAUNCH": "lightning"}  # PyTorch's own default stands
