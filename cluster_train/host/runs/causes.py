"""Why a run failed, read from its logs: one line each, with the fix (data, not code paths). Only evidence of a
failure counts: a rank that saved and stopped as asked exits REQUEUE (a cancel, a time-limit or preemption save),
and a run that was cancelled is named by its cancel (cluster_train/host/runs/ending.py), never by its log."""
import io
import json
import pickle
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from cluster_train.shared import calls
from cluster_train.shared.exit_codes import REQUEUE

# (pattern in a job log, what it means and what to do); the first match wins, so the specific ones come first
CAUSES: List[Tuple[str, str]] = [
    (r"\[cluster-train\] error: loss became (nan|inf)[^\n]*", "{0}; lower optim.lr or set trainer.gradient_clip_val"),
    (r"\[cluster-train\] error: disk full[^\n]*", "{0}"),
    (r"is not the image recorded for run", "image digest mismatch: the image file changed since submission; "
                                           "rerun with the recorded image (bin/run-cluster --rerun)"),
    (r"\[cluster-train\] error: ((\S+: )?the data image [^\n]*)", "{1}"),  # the job's check (_data.sh.j2)
    (r"time limit reached and all \d+ requeue\(s\) used", "time limit reached with every requeue used; "
                                                           "bin/run-cluster resume RUN_DIR, or raise max_requeues"),
    (r"\[cluster-train\] error: the time limit was reached and the script saved no checkpoint[^\n]*",
     "the time limit was reached and the script saved no checkpoint: it would start again from scratch, so it was "
     "not requeued; save on SIGUSR1 and exit $CT_REQUEUE_EXIT (docs/how-to/own-code.md, Long runs)"),
    (r"CUDA driver version is insufficient|driver.*too old", "the node's CUDA driver is older than the image's CUDA; "
                                                             "use the cuda11.6 image or a "
                                                             "partition with newer drivers"),
    (r"\[cluster-train\] error: (\S+ does not exist on \S+: fix the partition's nccl_plugin[^\n]*)", "{1}"),
    (r"Failed to initialize any NET plugin|network AWS Libfabric not found",
     "NCCL could not start the network NCCL_NET names (on HPE Slingshot the aws-ofi-nccl plugin with libfabric's cxi "
     "provider); logs/nccl-*.log names the library it could not load: check the partition's nccl_plugin, libfabric "
     "and fabric_libs"),
    (r"\[cluster-train\] error: (rank \d+ on host \S+ made no step for [^\n]*)",
     "HANG: {1}: the progress watchdog ended the job; the stacks show where the rank stopped"),
    (r"(NCCL|gloo)[^\n]*([Tt]imed? ?out|[Tt]imeout)", "a collective timed out (NCCL/gloo): a rank hung or died; "
                                                      "check the other ranks' lines above"),
    (r"oom[-_ ]kill|Out Of Memory|OUT_OF_MEMORY", "host RAM exhausted (OOM kill): lower data.num_workers "
                                                             "or raise mem_gb (see data.worker_mem_gb)"),
    (r"\[cluster-train\] error: rank (\d+) on host (\S+) exited with status (\d+)",
     "rank {1} died on host {2} (exit status {3}); its log lines above say why"),
    (rf"srun: error: (\S+): tasks? (\d+)[-,\d]*: (Exited with exit code (?!{REQUEUE}\b)|Killed)[^\n]*",
     "rank {2} died on host {1}; its log lines above say why"),
    (r"No space left on device", "disk full: free space where the run writes, or move the run directory"),
]

# What ended a run where its log cannot tell, as `status` words it on its `cause:` line (ending.py fills in the
# scheduler's own words; failures.py the run's record of its hangs and restart budget) or on a segment's line, and
# what to do then. The troubleshooting page lists them (docs/_ext/troubleshooting.py).
ENDED_BY: Dict[str, Tuple[str, str]] = {
    "hang": ("HANG: rank {rank} on host {host} made no step for {silent_s} s (at step {step}); stacks in {stacks}",
             "the progress watchdog ended the job: no step on that rank for hang_timeout. The stacks (every rank's "
             "Python stack, and NCCL's flight recorder) show where it stopped: in a collective, another rank or the "
             "network; in I/O, the file system; a GPU fallen off the bus, the node (it is left out of the requeued "
             "job). A step that is only slow (a long validation, a first compile): raise the profile's "
             "hang_timeout (default auto: 20 steps' time, at least 5 minutes)"),
    "died": ("rank {rank} died on host {host} (exit {exit_code})",
             "a rank killed by a signal (exit 128 + the signal: 137 SIGKILL, from the kernel's OOM killer or a "
             "kill -9; 135 SIGBUS, 139 SIGSEGV) ended the job's steps: its log lines, and the host's kernel log, say "
             "why. Within the restart budget (max_failures) the job is requeued and goes on from its last checkpoint"),
    "raised": ("rank {rank} on host {host} exited {exit_code} (its own exit, an exception: not requeued)",
               "a rank of your training ended by its own exit (an exception, sys.exit, a NaN loss), whatever exit "
               "srun gave the ranks it then ended: it would fail the same way again, so the job is not requeued; "
               "that rank's traceback is in the job log (bin/run-cluster logs RUN_DIR)"),
    "unsaved": ("the time limit was reached and the script saved no checkpoint: it would start again from scratch "
                "(exit {exit_code}), so it was not requeued",
                "the time-limit warning (SIGUSR1) reached a command that did not save and exit $CT_REQUEUE_EXIT (75), "
                "so a requeue would have started it from step 0 again: save $CT_CHECKPOINT_DIR/last.ckpt on the "
                "warning and exit $CT_REQUEUE_EXIT (cluster_train.image.resume does both; docs/how-to/own-code.md, "
                "Long runs), or give the profile a longer time"),
    "requeued": ("failure {failures} of at most {max_failures}, requeued{without}",
                 "a hang, a node failure or a killed rank: the job was requeued under the restart budget "
                 "(max_failures, failure-requeues per run, apart from time limits) and goes on from its last "
                 "checkpoint, without the nodes named; nothing to do unless it keeps failing"),
    "excluded": ("excluded: {hosts}",
                 "nodes left out of the requeued job, each with why (a hang on it, a node failure, a failed node "
                 "check): tell the site's admins; the job runs on the partition's other nodes"),
    "budget": ("{failures} failures, max_failures {max_failures}: {history}",
               "every failure-requeue of the restart budget was used: each segment's line in status says how it "
               "ended; fix what the failures have in common (the same rank, the same step), then bin/run-cluster "
               "resume RUN_DIR continues it, or raise the profile's max_failures"),
    "cancel": ("cancelled by bin/run-cluster cancel at {time}",
               "bin/run-cluster resume RUN_DIR continues it from its last checkpoint"),
    "outside": ("cancelled outside run-cluster ({said})",
                "the job was cancelled with the scheduler's own command (scancel, bkill), by you or the site: the "
                "scheduler's words in brackets say by whom; bin/run-cluster resume RUN_DIR continues it"),
    "scheduler": ("ended by the scheduler ({said})",
                  "the scheduler's words in brackets say why (NODE_FAIL: a node died; PREEMPTED; OUT_OF_MEMORY: "
                  "raise mem_gb); bin/run-cluster resume RUN_DIR continues it, --profile on another shape"),
    "session": ("the shell's command exited {code}",
                "an interactive session (run-cluster shell) ends with its command or shell, and run-cluster then "
                "releases its allocation: the exit status is the command's own, and its output was on your terminal"),
    "waited": ("cancelled: waited on run {run_id}, which ended {how}",
               "it waited (--after, a pipeline's earlier stage) on a run that did not complete: fix and rerun that "
               "one, then submit this one again"),
    "unrecorded": ("{scheduler} no longer knows job {job_id}, {accounting}, and the run's record ends with {record}",
                   "nobody recorded how the job ended (its batch shell was killed, the accounting is off or late): "
                   "bin/run-cluster logs RUN_DIR shows how far it got; bin/run-cluster resume RUN_DIR continues it"),
}


def ended_by(kind: str, **words: str) -> str:
    """ENDED_BY's words for this kind of end, filled in."""
    return ENDED_BY[kind][0].format(**words)


RANK_ONLY = "its log lines above say why"  # the causes that name only the rank that died (the record's say more)


def diagnose(run_dir: Path, rank_only: bool = True) -> Optional[str]:
    """The first known cause found in the run's logs (the scheduler's .out and .err files), or None; with
    rank_only False, none of those that only name the rank that died."""
    text = "\n".join(p.read_text(errors="replace") for p in sorted((Path(run_dir) / "logs").glob("*"))
                     if p.is_file() and p.suffix in (".out", ".err"))
    for pattern, message in CAUSES:
        if not rank_only and RANK_ONLY in message:
            continue
        found = re.search(pattern, text, re.MULTILINE)
        if found:
            return message.format(found.group(0), *found.groups()) if "{" in message else message
    return None


def waited_on(after: List[Dict[str, str]], ended: Callable[[Dict[str, str]], Optional[str]]) -> str:
    """Why a run that waited on others (its manifest's `after`) was cancelled: the first of them that ended other than
    COMPLETED (`ended`: how the run of an entry ended, None while it has not); "" where none did."""
    for entry in after:
        how = ended(entry)
        if how and how != "COMPLETED":
            return ended_by("waited", run_id=entry["run_id"], how=how)
    return ""


def pruned(run_dir: Path) -> str:
    """A study's trial its pruner stopped (pruned.json, written by cluster_train/host/search/driver.py)."""
    try:
        said = json.loads((Path(run_dir) / "pruned.json").read_text())
        return (f"pruned by study {said['study']} (trial {said['trial']}) after epoch {said['epoch']}: "
                f"{said['metric']} {said['value']:.4g}, the median of {said['of_trials']} finished trials "
                f"{said['median']:.4g}")
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def raised(run_dir: Path) -> str:
    """A function run's exception, as its rank 0 recorded it in call/result.pkl (cluster_train/image/call.py); ""
    for any other run, or one whose function returned. Its log holds no traceback: it went into that file."""
    path = Path(run_dir) / calls.RESULT
    if not path.is_file():
        return ""
    try:
        said = PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception:  # a returned value of some class (or a torn file): no exception's record
        return ""
    if "error" not in said:
        return ""
    message = str(said["message"]).strip().splitlines()  # its first line: a cause is one line
    return f"the function raised {said['type']}" + (f": {message[0]}" if message else "")


class PlainUnpickler(pickle.Unpickler):
    """Reads only plain data (the record of an exception is a dict of str and bytes): no class is imported here, so
    neither the exception nor a returned value's class runs any code of the run's on this machine."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")
