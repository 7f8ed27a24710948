"""Did NCCL use the fast network between the nodes, or fall back to TCP sockets? Read from NCCL's own log. And what
an HPE Slingshot job needs for NCCL to reach that network from inside the container at all.

An image without the verbs libraries (libibverbs, its providers, librdmacm), a node whose IB port is down, or an
NCCL_IB_DISABLE left set make NCCL fall back silently to sockets: the job runs, 4-40x slower in all-reduce. Where a
partition states `fabric: infiniband` or `fabric: slingshot`, a multi-node job has NCCL log its init and network
choice (NCCL_DEBUG=INFO, SUBSYS INIT,NET) to logs/nccl-<host>-<pid>.log; the job greps them when a segment ends
(the patterns below are rendered into the script, one source) and `run-cluster status` repeats the verdict.

HPE Slingshot (Perlmutter, LUMI, Alps, Frontier-class): NCCL has no transport of its own for it. It reaches the
network through the aws-ofi-nccl plugin (libnccl-net.so, which NCCL dlopens from the library path) and the host's
libfabric with its `cxi` provider; the image's PyPI NCCL has neither. A partition names the host's directories
(`nccl_plugin`, `libfabric`) and any single host libraries libfabric loads (`fabric_libs`: libcxi...); a multi-node
GPU job binds them read-only, puts them first on the container's LD_LIBRARY_PATH, and sets the NCCL and libfabric
variables the sites document (SLINGSHOT_ENV) where the cluster file or profile does not set them itself.
"""
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional

from cluster_train.shared.errors import UserError

# What NCCL prints when it picks its network (2.x: "NET/IB : Using [0]mlx5_0:1/IB ...", "Using network IB") and
# per channel ("via NET/IB/0"); the same for sockets. RoCE is IB verbs over Ethernet: NET/IB too.
IB = r"NET/IB ?: Using \[|Using network IB|via NET/IB"
SOCKET = r"NET/Socket ?: Using \[|Using network Socket|via NET/Socket"
LOG_GLOB = "nccl-*.log"
WARNING = ("NCCL fell back to TCP sockets between the nodes instead of InfiniBand (all-reduce 4-40x slower): the "
           "image or the node lacks the verbs libraries (libibverbs, its providers, librdmacm), the IB port is "
           "down, or NCCL_IB_DISABLE/NCCL_NET is set")
UNKNOWN = "NCCL's log does not say which network it used (NCCL_DEBUG lower than INFO?): InfiniBand is not confirmed"

# aws-ofi-nccl logs through NCCL's logger with the prefix "NET/OFI" ("NET/OFI Selected provider is cxi, fabric is
# cxi (found 4 nics)"; "Selected Provider is cxi" before 1.7). NCCL names the plugin's network "Libfabric"
# (aws-ofi-nccl 1.12 and later), "AWS Libfabric" (earlier ones, or any with NCCL_NET="AWS Libfabric") or "OFI"
# (NCCL_NET=OFI): "Using network AWS Libfabric" at init, "via NET/AWS Libfabric/0" per channel.
OFI = (r"NET/OFI Selected [Pp]rovider is cxi|Using network (AWS Libfabric|Libfabric|OFI)"
       r"|via NET/(AWS Libfabric|Libfabric|OFI)/")
# TCP either way: NCCL's own sockets, or the plugin on libfabric's TCP providers (a libfabric without cxi)
OFI_SOCKET = SOCKET + r"|NET/OFI Selected [Pp]rovider is (tcp|sockets|udp)"
SLINGSHOT_WARNING = ("NCCL fell back to TCP sockets between the nodes instead of HPE Slingshot (all-reduce 4-40x "
                     "slower): the container did not find the aws-ofi-nccl plugin (libnccl-net.so) or a libfabric "
                     "with the cxi provider, or NCCL_NET/FI_PROVIDER name another network; check the partition's "
                     "nccl_plugin, libfabric and fabric_libs")
SLINGSHOT_UNKNOWN = ("NCCL's log does not say which network it used (NCCL_DEBUG lower than INFO?): HPE Slingshot "
                     "(aws-ofi-nccl over cxi) is not confirmed")

# The variables NERSC (Perlmutter), CSCS (Alps) and HPE document for NCCL over aws-ofi-nccl on Slingshot, set
# where the cluster file or profile leaves them unset. NCCL_NET makes NCCL use the plugin or stop at its start
# (causes.py names it) instead of falling back to sockets for hours.
SLINGSHOT_ENV = {
    "NCCL_NET": "AWS Libfabric",
    "NCCL_SOCKET_IFNAME": "hsn",  # bootstrap over the Slingshot interfaces hsn0..hsn3
    "NCCL_NET_GDR_LEVEL": "PHB",  # GPUDirect RDMA where GPU and NIC share a PCIe host bridge
    "NCCL_CROSS_NIC": "1",
    "FI_PROVIDER": "cxi",
    "FI_CXI_DISABLE_HOST_REGISTER": "1",  # CUDA allocations otherwise deadlock with cxi's host registration
    "FI_MR_CACHE_MONITOR": "userfaultfd",
    "FI_CXI_DEFAULT_CQ_SIZE": "131072",
}
FABRIC_LIBS = "/opt/cluster-train/fabric-libs"  # where a partition's fabric_libs files appear in the container
PATH_KEYS = ("nccl_plugin", "libfabric", "fabric_libs")  # a partition's Slingshot keys
UNSAFE = re.compile(r"[:,]|\$\(|`")  # a bind's separators, a command


@dataclass(frozen=True)
class Check:
    """How a job on one fabric tells the fast network from sockets in NCCL's log, and what it says."""

    words: str  # the fabric in the messages
    used: str  # log lines that show the fast network in use
    slow: str  # log lines that show TCP sockets
    warning: str
    unknown: str
    fast: str  # what transport() calls the fast network


CHECKS = {"infiniband": Check("InfiniBand", IB, SOCKET, WARNING, UNKNOWN, "ib"),
          "slingshot": Check("HPE Slingshot", OFI, OFI_SOCKET, SLINGSHOT_WARNING, SLINGSHOT_UNKNOWN, "ofi")}


def check(fabric: str) -> Check:
    """The check of a fabric; a job recorded before jobs named theirs checked InfiniBand."""
    return CHECKS[fabric or "infiniband"]


def nccl_env(run_dir: str, env: Dict[str, str], fabric: str = "infiniband") -> Dict[str, str]:
    """What makes NCCL log its network choice to the run's logs (and, on Slingshot, reach it), without replacing
    what the site or user set."""
    wanted = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
              "NCCL_DEBUG_FILE": f"{run_dir}/logs/nccl-%h-%p.log",  # NCCL expands %h (host) and %p (pid)
              **(SLINGSHOT_ENV if fabric == "slingshot" else {})}
    return {k: v for k, v in wanted.items() if k not in env}


def transport(lines: Iterable[str], fabric: str = "infiniband") -> Optional[str]:
    """"socket" if any rank used sockets (one slow link slows every all-reduce), the fabric's own ("ib", "ofi") if
    they used it, else None."""
    found, rule = None, check(fabric)
    for line in lines:
        if re.search(rule.slow, line):
            return "socket"
        if re.search(rule.used, line):
            found = rule.fast
    return found


def verdict(run_dir: Path, fabric: str = "infiniband") -> Optional[str]:
    """The warning for a run whose partition states a fast fabric, from the NCCL logs so far; None when the fabric
    was used or no rank has started NCCL yet."""
    logs = sorted((Path(run_dir) / "logs").glob(LOG_GLOB))
    if not logs:
        return None
    used = transport((line for log in logs for line in log.read_text(errors="replace").splitlines()), fabric)
    return {"socket": check(fabric).warning, None: check(fabric).unknown}.get(used)


def check_keys(fabric: str, paths: Dict[str, object], where: str) -> None:
    """A partition's Slingshot keys as written: only beside `fabric: slingshot`, each an absolute path (or one that
    starts with a ${setting}), no bind separator or command; fabric_libs are files of distinct names."""
    given = [key for key in PATH_KEYS if paths.get(key)]
    if given and fabric != "slingshot":
        raise UserError(f"{where} sets {', '.join(given)} but its fabric is {fabric or 'not stated'!r}; these keys "
                        f"bind HPE Slingshot's NCCL plugin and libfabric: add 'fabric: slingshot' or remove them")
    for key in given:
        for path in paths[key] if isinstance(paths[key], list) else [paths[key]]:
            check_path(str(path), f"{where} {key}")
    names = [posixpath.basename(str(p)) for p in paths.get("fabric_libs") or []]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"{where} fabric_libs names {', '.join(twice)} twice; they share one directory in the "
                        f"container, keep one of each")


def check_path(path: str, where: str, expanded: bool = False) -> None:
    """One Slingshot path: absolute (before the settings are filled in, a ${setting} may start it)."""
    if UNSAFE.search(path):
        raise UserError(f"{where} = {path!r} holds ':' ',' '$(' or '`'; give the host path itself (a ${{setting}} "
                        f"from your settings may start it)")
    if not (path.startswith("/") or (path.startswith("$") and not expanded)):
        raise UserError(f"{where} = {path!r} is not an absolute path; give the host's path, like "
                        f"/opt/cray/libfabric/1.22.0/lib64")


@dataclass
class Slingshot:
    """What a multi-node GPU job on a Slingshot partition adds: binds, host paths to check, the library path."""

    binds: List[str]  # host:container:ro
    paths: List[str]  # host paths the job checks before apptainer exec
    library_path: str  # the container's directories, first on its LD_LIBRARY_PATH


def slingshot(part, expand: Callable[[str], str], cluster_file: str, job: str) -> Slingshot:
    """The binds and library path of `job` (a profile, in words) on a Slingshot partition, its paths' ${settings}
    filled in by `expand`; refused where the partition names no plugin: NCCL in the image would have no way onto
    the network, and the job would stop at NCCL's start or crawl over TCP sockets after its wait in the queue."""
    if not part.nccl_plugin:
        raise UserError(f"partition {part.name!r} of {cluster_file} states fabric: slingshot but gives no "
                        f"nccl_plugin, so NCCL in {job} has no way onto Slingshot (TCP sockets at best); add "
                        f"nccl_plugin: the host directory of the site's aws-ofi-nccl libnccl-net.so (module show "
                        f"nccl, or the site's NCCL documentation)")
    where = f"partition {part.name!r} of {cluster_file}"
    named = [("nccl_plugin", part.nccl_plugin)] + ([("libfabric", part.libfabric)] if part.libfabric else [])
    dirs = [expand(path) for _, path in named]
    files = [expand(path) for path in part.fabric_libs]
    for key, path in zip([k for k, _ in named] + ["fabric_libs"] * len(files), dirs + files):
        check_path(path, f"{where}: {key} (your settings filled in)", expanded=True)
    binds = [f"{d}:{d}:ro" for d in dirs] + [f"{f}:{FABRIC_LIBS}/{posixpath.basename(f)}:ro" for f in files]
    return Slingshot(binds, dirs + files, ":".join(dirs + ([FABRIC_LIBS] if files else [])))
