"""Runs cancelled on the test Slurm cluster at the start of a test session, for tests/test_runs_cancelled.py to check
while Slurm remembers their jobs and again at the session's end, once Slurm has forgotten them (MinJobAge).

The three ways issue 24 found a cancelled run stuck PENDING or UNKNOWN, and a cancel from outside run-cluster:
- requeued:   cancelled between two requeues (saved on the time-limit warning, requeued, cancelled while pending);
- unstarted:  cancelled before it started (held back an hour by its profile);
- scancelled: the same, cancelled with plain `scancel`: only sacct can say what ended it;
- sweep:      a 2-element sweep cancelled once both elements run, each saving more slowly than the cluster's
              KillWait, so that their batch shells are killed before they record their end.
Each job is `bash stop.sh` through the user-code path (no training): it runs until signalled and then stops as a
training rank does (saves, exits 75), or at once once the test has created `finish` in its run directory.

It runs as a process of its own (`python tests/cancel_scenarios.py DIR`, started by conftest's `cancelled_runs`):
pytest forks run-cluster children (tests/forked.py), which must not be forked beside a thread. DIR/runs holds the
runs, DIR/code the job's code, DIR/driver.log what it did, DIR/cancelled.json the jobs and when the last was
cancelled, once all are.
"""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_CLUSTER = [sys.executable, str(ROOT / "bin" / "run-cluster")]
SINGLE_RUNS = ("requeued", "unstarted", "scancelled")
ELEMENTS = ("sweep/e0", "sweep/e1")
# trains nothing: runs until signalled (SIGINT too: LSF's bkill sends it before SIGTERM), then saves and stops as a
# rank does (slowly with `slow`), or completes at once
STOP_SH = """echo "[test] segment $CT_SEGMENT running"
if [ -e "$CT_RUN_DIR/finish" ]; then echo "[test] finished"; exit 0; fi
trap 'kill $s 2>/dev/null; echo "[test] saving"; [ "${1:-}" != slow ] || sleep 60; exit 75' USR1 TERM INT
sleep 600 & s=$!
wait $s
"""


def job_id(run_dir: Path) -> str:
    return json.loads((run_dir / "manifest.json").read_text())["scheduler"]["job_id"]


def is_running(run_dir: Path) -> bool:
    logs = run_dir / "logs"
    return any("[test] segment" in p.read_text(errors="replace") for p in logs.glob("*.out"))


def slurm_state(job: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
    found = re.search(r"JobState=(\S+)", out)
    return found.group(1) if found else ""


def last_end(run_dir: Path) -> str:
    path = run_dir / "logs" / "segments.jsonl"
    ends = [json.loads(line) for line in path.read_text().splitlines() if '"end"' in line] if path.exists() else []
    return ends[-1]["how"] if ends else ""


class Driver:
    def __init__(self, base: Path):
        self.base, self.runs = base, base / "runs"
        self.env = {**os.environ, "CT_RUNS_DIR": str(self.runs)}

    def say(self, line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    def run_cluster(self, *args: str) -> str:
        done = subprocess.run([*RUN_CLUSTER, *args], cwd=self.base / "code", env=self.env, capture_output=True,
                              text=True, timeout=300)
        self.say(f"run-cluster {' '.join(args)}: exit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        if done.returncode != 0:
            raise RuntimeError(f"run-cluster {' '.join(args)} failed: {done.stderr[-1500:]}")
        return done.stdout

    def submit(self, run_id: str, profile: str, *more: str) -> None:
        # --stale-image-ok: the job is a shell script; what the image's own train package holds is not tested here
        self.run_cluster("ci-slurm", profile, "--run-id", run_id, "--no-wait", "--stale-image-ok", *more,
                         "--", "bash", "stop.sh", *(["slow"] if run_id == "sweep" else []))

    def wait_for(self, what: str, predicate, timeout_s: float = 240) -> None:
        deadline = time.time() + timeout_s
        while not predicate():
            if time.time() > deadline:
                raise RuntimeError(f"{what}: not within {timeout_s} s")
            time.sleep(0.5)
        self.say(what)

    def drive(self) -> None:
        (self.base / "code").mkdir(parents=True, exist_ok=True)
        (self.base / "code" / "stop.sh").write_text(STOP_SH)
        for run_id, profile in (("requeued", "n1_gpu1"), ("unstarted", "n1_gpu1_later"),
                                ("scancelled", "n1_gpu1_later")):
            self.submit(run_id, profile)
        self.submit("sweep", "n1_gpu1", "--sweep", "trainer.max_epochs=1,2")
        self.run_cluster("cancel", str(self.runs / "unstarted"))
        subprocess.run(["scancel", job_id(self.runs / "scancelled")], check=True)
        requeued = self.runs / "requeued"
        self.wait_for("requeued runs", lambda: is_running(requeued))
        subprocess.run(["scancel", "--batch", "--signal=USR1", job_id(requeued)], check=True)  # the time-limit warning
        self.wait_for("requeued saved and waits to start again",
                      lambda: last_end(requeued) == "REQUEUED" and slurm_state(job_id(requeued)) == "PENDING")
        self.run_cluster("cancel", str(requeued))
        elements = [self.runs / element for element in ELEMENTS]
        self.wait_for("both sweep elements run", lambda: all(is_running(e) for e in elements))
        self.run_cluster("cancel", str(self.runs / "sweep"))
        jobs = {name: job_id(self.runs / name) for name in (*SINGLE_RUNS, *ELEMENTS)}
        (self.base / "cancelled.json").write_text(json.dumps({"at": time.time(), "jobs": jobs}))


if __name__ == "__main__":
    Driver(Path(sys.argv[1])).drive()
