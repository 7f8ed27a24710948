"""Did NCCL use InfiniBand between the nodes, or fall back to TCP sockets? Read from NCCL's own log.

An image without the verbs libraries (libibverbs, its providers, librdmacm), a node whose IB port is down, or an
NCCL_IB_DISABLE left set make NCCL fall back silently to sockets: the job runs, 4-40x slower in all-reduce. Where a
partition states `fabric: infiniband`, a multi-node job has NCCL log its init and network choice (NCCL_DEBUG=INFO,
SUBSYS INIT,NET) to logs/nccl-<host>-<pid>.log; the job greps them when a segment ends (the patterns below are
rendered into the script, one source) and `run-cluster status` repeats the verdict.
"""
import re
from pathlib import Path
from typing import Dict, Iterable, Optional

# What NCCL prints when it picks its network (2.x: "NET/IB : Using [0]mlx5_0:1/IB ...", "Using network IB") and
# per channel ("via NET/IB/0"); the same for sockets. RoCE is IB verbs over Ethernet: NET/IB too.
IB = r"NET/IB ?: Using \[|Using network IB|via NET/IB"
SOCKET = r"NET/Socket ?: Using \[|Using network Socket|via NET/Socket"
LOG_GLOB = "nccl-*.log"
WARNING = ("NCCL fell back to TCP sockets between the nodes instead of InfiniBand (all-reduce 4-40x slower): the "
           "image or the node lacks the verbs libraries (libibverbs, its providers, librdmacm), the IB port is "
           "down, or NCCL_IB_DISABLE/NCCL_NET is set")
UNKNOWN = "NCCL's log does not say which network it used (NCCL_DEBUG lower than INFO?): InfiniBand is not confirmed"


def nccl_env(run_dir: str, env: Dict[str, str]) -> Dict[str, str]:
    """What makes NCCL log its network choice to the run's logs, without replacing what the site or user set."""
    wanted = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
              "NCCL_DEBUG_FILE": f"{run_dir}/logs/nccl-%h-%p.log"}  # NCCL expands %h (host) and %p (pid)
    return {k: v for k, v in wanted.items() if k not in env}


def transport(lines: Iterable[str]) -> Optional[str]:
    """"socket" if any rank used sockets (one slow link slows every all-reduce), "ib" if they used IB, else None."""
    found = None
    for line in lines:
        if re.search(SOCKET, line):
            return "socket"
        if re.search(IB, line):
            found = "ib"
    return found


def verdict(run_dir: Path) -> Optional[str]:
    """The warning for a run whose partition states InfiniBand, from the NCCL logs so far; None when IB was used
    or no rank has started NCCL yet."""
    logs = sorted((Path(run_dir) / "logs").glob(LOG_GLOB))
    if not logs:
        return None
    used = transport(line for log in logs for line in log.read_text(errors="replace").splitlines())
    return {"socket": WARNING, None: UNKNOWN}.get(used)
