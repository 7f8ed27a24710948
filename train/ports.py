"""The rendezvous port of a job, from its scheduler job id: the one formula the job scripts and the LSF cluster
environment share (a port per job, so two jobs on one node do not collide)."""
MASTER_PORT_BASE = 20000
MASTER_PORT_SPAN = 20000


def master_port(job_id: int) -> int:
    return MASTER_PORT_BASE + int(job_id) % MASTER_PORT_SPAN


def master_port_shell(job_id_variable: str) -> str:
    """The same formula as bash arithmetic over the scheduler's job id variable, for the job scripts."""
    return f"$(({MASTER_PORT_BASE} + {job_id_variable} % {MASTER_PORT_SPAN}))"
