"""When Slurm expects a job to start: before it is queued, `sbatch --test-only`'s answer (a dry run's line); once it
pends, its StartTime (the backfill scheduler's estimate, or its --begin)."""
import re
from typing import Dict, List, Optional, Tuple

# "sbatch: Job 2 to start at 2026-11-27T15:44:13 using 1 processors on nodes n1 in partition ci"
TEST_ONLY_START = re.compile(r"to start at (\S+) using .* on nodes (\S+) in partition (\S+)")
# a refusal: "allocation failure: Invalid account or account/partition combination specified", "sbatch: error: ..."
TEST_ONLY_REFUSAL = re.compile(r"error|failure|invalid", re.I)


def test_only_verdict(returncode: int, said: List[str]) -> Tuple[bool, str]:
    """(accepted, the line that says so) of sbatch --test-only's output lines: the start line where it accepts, the
    line naming the cause where it refuses; never a line printed beside it (the jobs it would preempt, `Preempts:`)."""
    accepted = returncode == 0
    wanted = TEST_ONLY_START if accepted else TEST_ONLY_REFUSAL
    found = [line for line in said if wanted.search(line)] or said[-1:] or [f"exit status {returncode}"]
    return accepted, found[0]


def test_only_start(verdict: Optional[Tuple[bool, str]]) -> str:
    """The dry run's line from sbatch --test-only's verdict (None: no controller answered)."""
    if verdict is None:
        return "start: no estimate (no Slurm controller answers sbatch --test-only from this machine)"
    found = TEST_ONLY_START.search(verdict[1])
    if not found:
        return f"start: no estimate (sbatch --test-only said: {verdict[1]})"
    at, nodes, partition = found.groups()
    return f"start: Slurm expects it at {at} on {nodes} in partition {partition} (sbatch --test-only, nothing queued)"


def pending_start(fields: Dict[str, str]) -> str:
    """A pending job's StartTime to the minute; "" while Slurm has none (Unknown, N/A, None)."""
    start = fields.get("StartTime", "")
    return start[:16] if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d", start) else ""
