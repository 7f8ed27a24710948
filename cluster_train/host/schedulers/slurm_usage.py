"""What Slurm's accounting says a job's allocations held and used (`sacct --duplicates`: a requeued job's every
allocation, not only its last): elapsed seconds x the GPUs and CPUs of its AllocTRES, the CPU time its steps used
(TotalCPU; 0 where the site gathers none) and ConsumedEnergyRaw (joules, where the site has an energy plugin)."""
import getpass
import re
import subprocess
from typing import Dict, List, Optional

FIELDS = "JobID,AllocTRES,ElapsedRaw,TotalCPU,ConsumedEnergyRaw"
CLOCK = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")  # sacct's [D-][H:]M:S[.mmm]


def usage(job_id: str = "", since: str = "", account: str = "") -> Optional[List[Dict[str, float]]]:
    """One record per allocation: gpu_s, cpu_s (held), cpu_used_s, energy_j; of one job, or of all your jobs since
    a time (YYYY-MM-DDTHH:MM:SS, one account's where named: a budget's use). None where sacct is not here or does
    not answer."""
    which = ["-j", job_id] if job_id else ["-u", getpass.getuser(), "-S", since, "-E", "now"]
    try:
        done = subprocess.run(["sacct", *which, *(["-A", account] if account else []), "--duplicates", "-X", "-n",
                               "-P", "-o", FIELDS], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    if done.returncode != 0:
        return None
    return [record(line.split("|")) for line in done.stdout.splitlines() if line.count("|") == 4]


def record(fields: List[str]) -> Dict[str, float]:
    _, tres, elapsed, total_cpu, energy = fields
    held = dict(item.split("=", 1) for item in tres.split(",") if "=" in item)
    seconds = float(elapsed or 0)
    return {"gpu_s": seconds * count(held.get("gres/gpu")), "cpu_s": seconds * count(held.get("cpu")),
            "cpu_used_s": clock_seconds(total_cpu), "energy_j": float(energy) if energy.isdigit() else 0.0}


def count(text: Optional[str]) -> float:
    return float(text) if text and text.isdigit() else 0.0


def clock_seconds(text: str) -> float:
    found = CLOCK.match(text.strip())
    if not found:
        return 0.0
    days, hours, minutes, seconds = found.groups()
    return ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes)) * 60 + float(seconds)
