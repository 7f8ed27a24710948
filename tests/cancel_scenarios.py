"""Runs cancelled on the test Slurm cluster at the start of a test session, for tests/cluster/test_runs_cancelled.py
to check while Slurm remembers their jobs and again at the session's end, once Slurm has forgotten them (MinJobAge).

The three ways issue 24 found a cancelled run stuck PENDING or UNKNOWN, and a cancel from outside run-cluster:
- requeued:   cancelled between two requeues (saved on the time-limit warning, requeued, cancelled while pending);
- unstarted:  cancelled before it started (held back an hour by its profile);
- scancelled: the same, cancelled with plain `scancel`: only sacct can say what ended it;
- sweep:      a 2-element sweep cancelled once both elements run, each saving more slowly than the cluster's
              KillWait, so that their batch shells are killed before they record their end; its e0's status is
              taken at once, while Slurm still ends it (COMPLETING).
Each job is `bash stop.sh` through the user-code path (no training): it runs until signalled and then stops as a
training rank does (saves, exits 75), or at once once the test has created `finish` in its run directory.

Once the jobs have left the queue it observes each run as a user would (`observe`: status, logs --follow, a second
cancel, resume --dry-run) while Slurm still remembers the jobs, whenever in the session the test that reads it runs.

It runs as a process of its own (`python tests/cancel_scenarios.py DIR`, started by conftest's `cancelled_runs`):
pytest forks run-cluster children (tests/forked.py), which must not be forked beside a thread. DIR/runs holds the
runs, DIR/code the job's code, DIR/driver.log what it did, and DIR/cancelled.json, once it is done, the jobs, when
the last was cancelled, what scontrol said of each and what each command printed.
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
# (the trap first: "running" is what the driver waits for before it cancels, so it must mean the trap is set)
STOP_SH = """trap 'kill $s 2>/dev/null; echo "[test] saving"; [ "${1:-}" != slow ] || sleep 60; exit 75' USR1 TERM INT
echo "[test] segment $CT_SEGMENT running"
if [ -e "$CT_RUN_DIR/finish" ]; then echo "[test] finished"; exit 0; fi
sleep 600 & s=$!
wait $s
"""


def run_cluster(*args, env=None, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """bin/run-cluster ARGS in a process of its own, as tests/conftest.py's run_cluster returns it."""
    return subprocess.run([*RUN_CLUSTER, *map(str, args)], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def observe(run, run_dir: Path, env: dict) -> dict:
    """What a user sees of a cancelled run, by `run` (a run_cluster): status, logs --follow (which must return), a
    second cancel, resume --dry-run; each command's exit status and output."""
    seen = {}
    for name, args, timeout in (("status", ["status"], 60), ("follow", ["logs", "--follow"], 120),
                                ("again", ["cancel"], 60), ("resume", ["resume", "--dry-run"], 120)):
        done = run(*args, run_dir, env=env, timeout=timeout)
        seen[name] = {"rc": done.returncode, "out": done.stdout[-3000:], "err": done.stderr[-3000:]}
    return seen


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
        done = run_cluster(*args, env=self.env, cwd=self.base / "code")
        self.say(f"run-cluster {' '.join(args)}: exit {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        if done.returncode != 0:
            raise RuntimeError(f"run-cluster {' '.join(args)} failed: {done.stderr[-1500:]}")
        return done.stdout

    def submit(self, run_id: str, profile: str, *more: str) -> None:
        # --stale-image-ok: the job is a shell script; what the
        # image's own cluster_train package holds is not tested here
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
        cancelled_at = time.time()
        # at once, while the elements save for longer than KillWait (Slurm: COMPLETING): being cancelled, not RUNNING
        cancelling = run_cluster("status", elements[0], env=self.env).stdout
        jobs = {name: job_id(self.runs / name) for name in (*SINGLE_RUNS, *ELEMENTS)}
        self.wait_for("the jobs left the queue", lambda: not subprocess.run(
            ["squeue", "-h", "-j", ",".join(jobs.values())], capture_output=True, text=True).stdout, 120)
        scontrol = {name: slurm_state(job) for name, job in jobs.items()}  # before the observations: Slurm knew
        seen = {name: observe(run_cluster, self.runs / name, self.env) for name in jobs}
        seen["sweep"] = {"status": run_cluster("status", self.runs / "sweep", env=self.env).stdout}
        self.say(f"observed every run; scontrol said {scontrol}")
        (self.base / "cancelled.json").write_text(json.dumps({"at": cancelled_at, "jobs": jobs, "scontrol": scontrol,
                                                              "seen": seen, "cancelling": cancelling}))


if __name__ == "__main__":
    Driver(Path(sys.argv[1])).drive()
