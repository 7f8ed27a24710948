"""The rendezvous port every rank of a job agrees on without talking: MASTER_PORT from the scheduler's job id.

One formula for the job templates (rendered from these numbers)
and for cluster_train/image/lsf_environment.py. Torch-free.
"""
MASTER_PORT_BASE = 20000
MASTER_PORT_SPAN = 20000  # ports BASE .. BASE + SPAN - 1: jobs sharing a node rarely collide


def master_port(job_id: int) -> int:
    return MASTER_PORT_BASE + int(job_id) % MASTER_PORT_SPAN


def master_port_shell(job_id_variable: str) -> str:
    """The same formula as bash arithmetic over the scheduler's job id variable, for the job scripts."""
    return f"$(({MASTER_PORT_BASE} + {job_id_variable} % {MASTER_PORT_SPAN}))"
