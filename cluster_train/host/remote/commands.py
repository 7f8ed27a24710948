"""The laptop's side of every command on a cluster reached over SSH: submit (config checked here, files and settings
sent, the launcher run there), status, logs, cancel, resume and --rerun of a run that lives there, and its files
fetched back (report, compare, fetch)."""
import json
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared.errors import UserError, UserErrors
from cluster_train.host import project
from cluster_train.host.data import store as data_store
from cluster_train.host.images import store
from cluster_train.host.scheduling.job import new_run_id
from cluster_train.host.progress import Report, ignore
from cluster_train.host.remote import ssh, sync
from cluster_train.host.reach import Reach, of
from cluster_train.host.usage import Parser

RECORD = "remote.json"  # in the laptop's runs/<id>: where the run lives
ERROR = "run-cluster: error: "  # how the launcher there says each problem


def send(site, dry_run: bool, image: Optional[store.ImageRecord], data: Optional[data_store.DataRecord] = None,
         report: Report = ignore) -> Tuple[Reach, str]:
    """What a submission on the cluster's login node needs there: the code, the settings, the image (this machine's
    current one of the flavor the job needs) and the data image the run names (a dry run too: the cluster renders
    its bind); the transfers' progress reported. Its reach, and a line saying what was sent."""
    reach = of(site.cluster.name, site.user)
    files, sent = sync.send_code(reach)
    sync.send_settings(reach, site.user)
    image_bytes = 0 if dry_run else sync.send_image(reach, image, report)
    data_sent = f"; data image sent, {sync.send_data(reach, data, report)} bytes" if data else ""
    return reach, (f"[cluster-train] {ssh.where(reach)}: code sent, {files} changed files, {sent} bytes; image sent, "
                   f"{image_bytes} bytes{data_sent}")


def launch(reach: Reach, argv: List[str], run_id: str, dry_run: bool,
           capture: bool = False) -> subprocess.CompletedProcess:
    """`run-cluster CLUSTER PROFILE ...` on the cluster's login node under the run id chosen here (after `send`);
    a queued run is recorded here (runs/<id>/remote.json). Its output streamed, or captured for the API."""
    named = run_id in argv or f"--run-id={run_id}" in argv  # typed: said once, as the run's manifest records argv
    done = launcher(reach, argv if named else [*argv, "--run-id", run_id], capture)
    if done.returncode == 0 and not dry_run:
        write_record(reach, run_id)
    return done


def refused(reach: Reach, done: subprocess.CompletedProcess) -> UserError:
    """A launcher that failed there, as the error the command line shows for it: its own lines, naming where."""
    said = done.stderr.splitlines()
    lines = [line.split(ERROR, 1)[1] for line in said if ERROR in line]
    if not lines:
        lines = [f"bin/run-cluster ended with exit status {done.returncode}: "
                 f"{said[-1] if said else 'it said nothing'}"]
    errors = [UserError(f"{ssh.where(reach)}: {line}") for line in lines]
    return errors[0] if len(errors) == 1 else UserErrors(errors)


def launcher(reach: Reach, argv: List[str], capture: bool = False) -> subprocess.CompletedProcess:
    """bin/run-cluster on the cluster, in the project's copy, with the settings sent for it; its output streamed
    unless captured."""
    return ssh.run(reach, [reach.python, "bin/run-cluster", *argv], cwd=reach.remote_dir,
                   env={"CT_SETTINGS": reach.settings_file}, capture=capture)


def write_record(reach: Reach, run_id: str) -> Path:
    run_dir = project.run_dir_for(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"run_id": run_id, "cluster": reach.cluster, "ssh": reach.destination, "remote_dir": reach.remote_dir,
              "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (run_dir / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return run_dir


def record_of(run_dir: Path) -> Optional[dict]:
    file = Path(run_dir) / RECORD
    return json.loads(file.read_text()) if file.is_file() else None


def reached(record: dict) -> Reach:
    """The run's cluster as your settings reach it now (a moved login node is followed), with those settings sent."""
    from cluster_train.host.jobs.build import Site

    site = Site.load(record["cluster"])
    reach = of(site.cluster.name, site.user)
    if reach is None:
        raise UserError(f"run {record['run_id']} lives on {record['cluster']} over ssh ({record['ssh']}), but your "
                        f"settings no longer give {record['cluster']} an ssh:; add it back")
    sync.send_settings(reach, site.user)
    return reach


def proxied(argv: List[str]) -> Optional[int]:
    """A run command (status, logs, cancel, resume, --rerun) whose run lives on a cluster over SSH, run there with
    the run's id in place of its local directory; None where the run is this machine's. Only this machine's own
    runs/ holds such records, so nothing else is read to decide."""
    for i, arg in enumerate(argv):
        record = None if arg.startswith("-") else record_of(local_dir(arg))
        if record is None:
            continue
        remote_argv = [*argv[:i], record["run_id"], *argv[i + 1:]]
        reach = reached(record)
        if "--rerun" not in argv:
            return launcher(reach, remote_argv).returncode
        run_id = new_run_id(reach.cluster, "rerun")
        done = launcher(reach, [*remote_argv, "--run-id", run_id])
        if done.returncode == 0 and "--dry-run" not in argv:
            write_record(reach, run_id)
        return done.returncode
    return None


def local_dir(arg: str) -> Path:
    path = Path(arg)
    return path if path.exists() or not project.RUN_ID.match(arg) else project.runs_dir() / arg


CODE = ("code/", "code.tar")  # the run's code snapshot: this machine has the code
FETCHED_OUT = ("checkpoints/", "*.ckpt", "models/", *CODE)  # stay on the cluster: large, not for reading


def fetched(argv: List[str]) -> List[str]:
    """report and compare of runs that live on a cluster over SSH: each such run's small files (results, metrics,
    logs, manifest, config) fetched into its local record directory, and that directory put in its place."""
    out = []
    for arg in argv:
        record = None if arg.startswith("-") else record_of(local_dir(arg))
        out.append(str(fetch(record, local_dir(arg))) if record else arg)
    return out


def fetch_command(argv: List[str]) -> int:
    """`run-cluster fetch RUN [--checkpoints]`: a run's files from its cluster into its record here."""
    p = Parser(prog="run-cluster fetch", description="copy a run that lives on a cluster over SSH here: its results, "
               "metrics, logs, manifest and config (what report and compare fetch), and with --checkpoints its "
               "checkpoints/ and exported models/ too")
    p.add_argument("run", help="the run's id or its directory here (runs/<id>)")
    p.add_argument("--checkpoints", action="store_true", help="also its checkpoints/ and models/ (large)")
    args = p.parse_args(argv)
    into = local_dir(args.run)
    record = record_of(into)
    if record is None:
        raise UserError(f"{into} holds no {RECORD}: run {args.run} was not submitted from here to a cluster over "
                        f"ssh; its files are where it ran (see bin/run-cluster runs)")
    fetch(record, into, CODE if args.checkpoints else FETCHED_OUT)
    kept = "" if args.checkpoints else " (checkpoints and models stay there: --checkpoints fetches them)"
    print(f"fetched run {record['run_id']} from {record['cluster']} over ssh into {into}{kept}")
    return 0


def fetch(record: dict, into: Path, leave=FETCHED_OUT) -> Path:
    """The run's files, less what `leave` names, into `into` (rsync: only what changed since the last fetch)."""
    reach = reached(record)
    where = sync.launcher_line(reach, ["runs", "--json", "--here", "--cluster", reach.cluster])
    rows = [json.loads(line) for line in where.splitlines() if line.startswith("{")]
    row = next((r for r in rows if r["run"] == record["run_id"]), None)
    if row is None:
        raise UserError(f"{ssh.where(reach)} has no run {record['run_id']} any more; "
                        f"remove {into} here if it was deleted there")
    sync.fetch_dir(reach, row["dir"], into, leave)
    return into
