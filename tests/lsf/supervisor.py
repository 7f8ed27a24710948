"""The per-job supervisor of the LSF stand-in of the tests (see standin.py): the part LSF's sbatchd plays.

bsub (and brequeue of a finished job) starts it detached, as `standin.py --supervise ID`. From dispatch to the job's end
it runs the batch script on the job's first host in its own process group, sends that group the warning action, the
run-limit signals and the kills bkill and brequeue ask for, records how each run ended, and requeues or finishes the
job. on_host, the prefix that runs a command in a test host's namespaces, is here too: blaunch uses it as well.
"""
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from bsub_options import QUEUES, place, requeues_on, signal_number
from host_failure import unavailable
from records import STATE, event, history, job_dir, read, write

HERE = Path(__file__).resolve().parent
POLL_S = 0.05


def start_supervisor(job_id: str) -> None:
    subprocess.Popen([sys.executable, str(HERE / "standin.py"), "--supervise", job_id], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                     env={**os.environ, "CT_LSF_STATE": str(STATE)})


def on_host(host: str) -> str:
    """The command prefix that runs on a test host: its network and UTS namespace, as a remote node."""
    if not Path(f"/run/netns/{host}").exists():
        return ""
    return f"nsenter --net=/run/netns/{host} -- unshare --uts -- sh -c 'hostname {host} && exec \"$0\" \"$@\"'"


def supervise(job_id: str) -> None:
    job = job_dir(job_id)
    rec = json.loads((job / "job.json").read_text())
    env = json.loads((job / "env.json").read_text())
    while True:
        runs = sum(1 for e in history(job) if e["event"] == "start")
        if runs:  # a requeued job pends until the next dispatch
            deadline = time.time() + rec["requeue_delay_s"]
            while time.time() < deadline and not (job / "kill_request").exists():
                time.sleep(POLL_S)
        elif rec.get("waits_on") and not dependencies_met(job, rec):
            return  # an orphan, ended
        if rec.get("array_cap"):
            wait_for_a_slot(job, rec)
        if (job / "kill_request").exists():  # bkill of a pending job
            (job / "kill_request").unlink()
            finish(job, "EXIT", 130, "TERM_OWNER")
            return
        outcome = run_once(job, rec, env, restart=runs > 0)
        if outcome is None:  # requeued
            continue
        finish(job, *outcome)
        return


def wait_for_a_slot(job: Path, rec: dict) -> None:
    """An element of `-J "name[...]%K"` pends while K elements of its array run, or an element of a lower index
    waits for its first dispatch (LSF dispatches an array in index order), or until a kill comes; the check and the
    claim are one step under the array's lock, so two elements never take the last slot together."""
    array = job_dir(str(rec["array_id"]))
    while not (job / "kill_request").exists():
        with (array / "lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stats = {int(other.name.split("[")[1][:-1]): (read(other, "stat"), (other / "pid").exists())
                     for other in STATE.glob(f"{rec['array_id']}[[]*[]]")}
            running = sum(1 for stat, _ in stats.values() if stat == "RUN")
            earlier = any(stat == "PEND" and not started for i, (stat, started) in stats.items() if i < rec["index"])
            if running < rec["array_cap"] and not earlier:
                write(job, "stat", "RUN")  # claimed: run_once starts it at once
                return
        time.sleep(POLL_S * 4)


def dependencies_met(job: Path, rec: dict) -> bool:
    """A job with -w pends until every job it waits on is DONE (True; also when a kill comes, which the caller acts
    on). Once one has exited otherwise it is an orphan: with -ti it ends at once, EXIT with TERM_ORPHAN_SYSTEM
    (False); without, it pends until someone kills it, as LSF leaves it with no grace period configured."""
    while not (job / "kill_request").exists():
        stats = [read(job_dir(other), "stat") for other in rec["waits_on"]]
        if all(stat == "DONE" for stat in stats):
            return True
        if "EXIT" in stats and rec["orphan_termination"]:
            finish(job, "EXIT", 130, "TERM_ORPHAN_SYSTEM")
            return False
        time.sleep(POLL_S * 4)
    return True


def finish(job: Path, stat: str, code: int, reason) -> None:
    write(job, "exit_code", str(code))
    write(job, "exit_reason", reason or "-")
    write(job, "stat", stat)
    event(job, "finish", stat=stat, code=code, reason=reason)


def signal_job(job: Path, pgid: int, signum: int, why: str) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return
    event(job, "signal", signal=signal.Signals(signum).name[3:], why=why)


def dispatch_as_modified(job: Path, rec: dict, env: dict) -> None:
    """A job bmod -R changed while it ran is dispatched to the hosts its new requirements allow; one whose hosts are
    not all available now (a rerun after a host failed) to available hosts its requirements allow."""
    fresh = json.loads((job / "job.json").read_text())
    modified = fresh.pop("next_slots", None)
    slots = modified or rec["slots"]
    down = unavailable(QUEUES[rec["queue"]]["hosts"])
    if set(down) & set(slots):
        slots = place({"-q": rec["queue"], "-n": str(len(slots)),
                       "-R": fresh.get("resources", []) + [f"select[{' && '.join(f'hname!={h}' for h in down)}]"]})
    if not modified and slots == rec["slots"]:
        return
    rec["slots"] = fresh["slots"] = slots
    hosts = list(dict.fromkeys(slots))
    env.update(LSB_HOSTS=" ".join(slots), LSB_MCPU_HOSTS=" ".join(f"{h} {slots.count(h)}" for h in hosts))
    (job / "hostfile").write_text("".join(f"{h}\n" for h in slots))
    (job / "job.json").write_text(json.dumps(fresh, indent=1))
    (job / "env.json").write_text(json.dumps(env))


def run_once(job: Path, rec: dict, env: dict, restart: bool):
    """Dispatch the script once; None if the job is requeued, else (stat, exit code, exit reason)."""
    (job / "requeue_request").unlink(missing_ok=True)
    dispatch_as_modified(job, rec, env)
    out = open(rec["out"], rec["out_mode"])
    err = out if rec["err"] == rec["out"] else open(rec["err"], rec["err_mode"])
    run_env = dict(env)
    command = ["bash", str(job / "script.sh")]
    if restart:
        run_env["LSB_RESTART"] = "Y"
        command = ["bash", "-c", 'export LSB_RESTART_PID=$$; exec bash "$0"', str(job / "script.sh")]
    hosts = list(dict.fromkeys(rec["slots"]))
    cwd = rec["cwd"] if Path(rec["cwd"]).is_dir() else None
    proc = subprocess.Popen(shlex.split(on_host(hosts[0])) + command, env=run_env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=out, stderr=err, start_new_session=True)
    out.close()
    err.close()
    write(job, "pid", str(proc.pid))
    for name in ("exit_code", "exit_reason"):
        (job / name).unlink(missing_ok=True)
    write(job, "stat", "RUN")
    event(job, "start", pid=proc.pid, hosts=hosts, slots=rec["slots"], restart=restart)
    started = time.time()
    limit, warn_at = rec["runlimit_s"], None
    if limit is not None and rec["warning_s"] is not None:
        warn_at = max(0.0, limit - rec["warning_s"])
    reason, plan, host_lost = None, [], ""  # plan: [(seconds since start, signal, why)] still to send
    interval = rec["terminate_interval_s"]
    while proc.poll() is None:
        now = time.time() - started
        if warn_at is not None and now >= warn_at:
            signal_job(job, proc.pid, signal_number(rec["warning_action"]), "job warning action")
            warn_at = None
        if reason != "TERM_REQUEUE_OWNER" and (job / "requeue_request").exists():
            reason = "TERM_REQUEUE_OWNER"  # killed as bkill kills
            plan = [(now, signal.SIGINT, "brequeue"), (now, signal.SIGTERM, "brequeue"),
                    (now + interval, signal.SIGKILL, "brequeue")]
        elif reason is None and (job / "kill_request").exists():
            reason = "TERM_OWNER"
            plan = [(now, signal.SIGINT, "bkill"), (now, signal.SIGTERM, "bkill"),
                    (now + interval, signal.SIGKILL, "bkill")]
        elif not host_lost and (job / "host_failed").exists():  # host_failure.py: LSF shuts the whole job down
            host_lost = read(job, "host_failed")
            why = f"execution host {host_lost} unavailable"
            plan = [(now, signal.SIGINT, why), (now, signal.SIGTERM, why), (now + interval, signal.SIGKILL, why)]
        elif reason is None and limit is not None and now >= limit:
            reason = "TERM_RUNLIMIT"
            grace = rec["runlimit_grace_s"]
            plan = [(now, signal.SIGUSR2, "run limit"), (now + grace, signal.SIGINT, "run limit"),
                    (now + grace, signal.SIGTERM, "run limit"), (now + grace + interval, signal.SIGKILL, "run limit")]
        while plan and now >= plan[0][0]:
            signal_job(job, proc.pid, plan[0][1], plan[0][2])
            plan.pop(0)
        time.sleep(POLL_S)
    try:  # what the script left running in its process group ends with it (a requeued job must not run twice)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    if (job / "requeue_request").exists():  # also when the script exited by itself right after `brequeue`
        reason = "TERM_REQUEUE_OWNER"
    requeue_value = (rec["requeue_exit_values"] and reason != "TERM_OWNER"
                     and requeues_on(rec["requeue_exit_values"], code))
    stat = "DONE" if code == 0 and reason is None else "EXIT"
    host_lost = host_lost or read(job, "host_failed")  # also where the script ended before the shutdown began
    (job / "host_failed").unlink(missing_ok=True)
    rerun = host_lost and rec.get("rerunnable") and not (job / "kill_request").exists()  # bsub -r: rerun elsewhere
    event(job, "end", code=code, stat=stat, reason=reason, signal=-proc.returncode if proc.returncode < 0 else None,
          requeue="brequeue" if reason == "TERM_REQUEUE_OWNER" else "exit value" if requeue_value
          else "rerun" if rerun else None)
    write(job, "exit_code", str(code))
    if reason == "TERM_REQUEUE_OWNER" or requeue_value:
        write(job, "stat", "PEND")
        event(job, "requeued", why=reason or f"requeue exit value {code}")
        return None
    if rerun:
        write(job, "stat", "PEND")
        event(job, "requeued", why=f"execution host {host_lost} unavailable; the job is rerun")
        return None
    return stat, code, reason
