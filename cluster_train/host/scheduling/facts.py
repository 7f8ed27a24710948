"""The scheduler facts every room reads, below the adapters (cluster_train/host/schedulers/) that map their own
scheduler's words onto them: one vocabulary of job states and the sets of them that mean ended or not yet started, the
names a scheduler directive or a `module load` may take, and the built-in schedulers' names (the settings refuse a site
adapter of one of those names without importing the adapters)."""
import enum
import re
from typing import Dict, Optional


class State(str, enum.Enum):
    """One state vocabulary over every scheduler (Slurm's names; LSF's and the local runner's map onto them)."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    PREEMPTED = "PREEMPTED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def of(cls, name: str, aliases: Optional[Dict[str, str]] = None) -> "State":
        name = (aliases or {}).get(name, name)
        return cls.__members__.get(name, cls.UNKNOWN)


FINISHED = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED, State.TIMEOUT, State.NODE_FAIL,
                      State.OUT_OF_MEMORY, State.BOOT_FAIL, State.DEADLINE, State.PREEMPTED})
NOT_STARTED = frozenset({State.PENDING, State.CONFIGURING, State.UNKNOWN})
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # what may appear unquoted in a scheduler directive
MODULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+/@-]*$")  # `module load NAME` (e.g. cuda/12.8)
BUILT_IN = ("slurm", "lsf", "local")  # schedulers/__init__.py asserts its SCHEDULERS list these, in this order
