"""Whether a command is known to resume after its time limit, for the summary before queueing: the batch shell
requeues a warned run only when it exited CT_REQUEUE_EXIT (or, a registered task, saved in that segment:
templates/_segments.sh.j2), so own code that never uses the requeue contract ends at its limit. Known by reading its
code snapshot for the contract's words: cheap (the snapshot is at most a few MB of code) and never run."""
import re
import tarfile
from typing import Optional

from cluster_train.host.jobs.code_snapshot import Snapshot
from cluster_train.host.scheduling.job import ResolvedJob

# the requeue contract's words: the exit code's variable, or an import of the image's resume helpers
CONTRACT = re.compile(r"CT_REQUEUE_EXIT|\bcluster_train\.image\.resume(_lightning)?\b"
                      r"|\bfrom\s+cluster_train\.image\s+import\s+[^\n]*\bresume(_lightning)?\b")
SOURCES = (".py", ".sh", ".bash")  # where a command's save-and-exit lives (not its data, notebooks or docs)
MAX_FILE_BYTES = 2 * 2**20  # a larger "source" file is generated or data: not read
DOCS = "docs/how-to/own-code.md#long-runs"


def summary_line(job: ResolvedJob, requeues: bool, snapshot: Optional[Snapshot]) -> str:
    """'resume: ...': whether the run goes on after its time limit. `requeues`: the scheduler requeues a job
    itself (else there is nothing to say: the run ends at its limit whatever it saves)."""
    if not requeues:
        return ""
    most = f"requeued at most {job.placement.max_requeues} time(s)"
    if job.work.entry == "fit":
        return f"resume: yes: the task saves on the time-limit warning and is {most}"
    found = contract_file(snapshot) if snapshot else ""
    if found:
        return f"resume: known to resume ({found} uses the requeue contract): at its time limit it saves and is {most}"
    return (f"resume: not known to resume (no file of its code mentions CT_REQUEUE_EXIT or imports "
            f"cluster_train.image.resume): at its time limit ({job.placement.time}) it ends and is not requeued; "
            f"see {DOCS}")


def contract_file(snapshot: Snapshot) -> str:
    """The first source file of the snapshot that uses the requeue contract, "" where none does."""
    with tarfile.open(snapshot.tar_path) as tar:
        for member in tar:
            if not (member.isfile() and member.name.endswith(SOURCES) and member.size <= MAX_FILE_BYTES):
                continue
            data = tar.extractfile(member)
            if data and CONTRACT.search(data.read().decode("utf-8", errors="replace")):
                return member.name
    return ""
