"""`run-cluster notebook` from a laptop (ssh: in your settings): the code, settings and image sent as for any
submission (cluster_train/host/remote), then the same command run on the login node over the shared connection,
which submits, waits and says where the server listens (one line, with the token: it travels inside the encrypted
session, never on a command line). The laptop then forwards its port there through that connection (forward.py) and
prints the URL. The session's stdin is the login node's signal: Ctrl-C here closes it, and the command there cancels
the job and says so before it ends; a connection that drops closes it too."""
import json
import subprocess
import sys
from typing import List, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.interactive import forward
from cluster_train.host.interactive.notebook_common import SERVER, flavor_of, opened, refuse_without_jupyterlab
from cluster_train.host.jobs.build import Site
from cluster_train.host.scheduling.job import new_run_id
from cluster_train.host.reach import Reach
from cluster_train.host.remote import ssh

LEAVE_WAIT_S = 120  # after Ctrl-C: how long the login node may take to cancel the job and let it go


def notebook(site: Site, args, port: int) -> int:
    from cluster_train.host.images import store
    from cluster_train.host.remote import commands as remote
    from cluster_train.host.status_line import shown_progress

    image = store.current(flavor_of(site, args), project.images_dir())  # this machine's, the one sent
    refuse_without_jupyterlab(image)  # before anything is sent
    with shown_progress() as shown:
        reach, sent = remote.send(site, False, image, None, shown)
    print(sent, flush=True)
    session = subprocess.Popen(remote_argv(reach, login_node_args(args)), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, start_new_session=True)  # Ctrl-C is ours alone
    forwarded: List[Tuple[str, int]] = []
    try:
        follow(session, reach, port, forwarded)
    except BaseException as err:  # Ctrl-C, or a forward that failed: the job there cancelled before we end
        leave(session)
        if not isinstance(err, KeyboardInterrupt):
            raise
    finally:
        for target in forwarded:
            forward.ssh_cancel(reach, port, target)
    if session.returncode == 255:  # the shared connection ended under the session
        raise UserError(f"{ssh.where(reach)}: the connection dropped, and the tunnel with it; the login node "
                        f"cancels the notebook's job when it sees the session end (check: bin/run-cluster runs)")
    return 0 if session.returncode in (0, None) else session.returncode


def login_node_args(args) -> List[str]:
    words = ["notebook", args.cluster, args.profile, *([args.experiment] if args.experiment else [])]
    for option, value in (("--time", args.time), ("--flavor", args.flavor)):
        words += [option, value] if value else []
    run_id = args.run_id or new_run_id(args.cluster, args.profile)
    flags = [flag for flag, given in (("--dev", args.dev), ("--stale-image-ok", args.stale_image_ok)) if given]
    return [*words, "--run-id", run_id, *flags, "--over-ssh"]


def remote_argv(reach: Reach, words: List[str]) -> List[str]:
    """ssh running bin/run-cluster WORDS in the project's copy there, over the shared connection."""
    line = ssh.remote_line([reach.python, "bin/run-cluster", *words], cwd=reach.remote_dir,
                           env={"CT_SETTINGS": reach.settings_file})
    return [*ssh.ssh_argv(reach), "--", reach.destination, line]


def follow(session: subprocess.Popen, reach: Reach, port: int, forwarded: List[Tuple[str, int]]) -> None:
    """The login node's lines shown as they come; its server line becomes the forward (kept in `forwarded`) and the
    URL here."""
    for line in session.stdout:
        if line.startswith(SERVER):
            server = json.loads(line[len(SERVER):])
            target = (server["address"], int(server["port"]))
            forward.ssh_forward(reach, port, target)
            forwarded.append(target)
            opened(server["host"], port, server["token"])
        else:
            print(line, end="", flush=True)
    session.wait()


def leave(session: subprocess.Popen) -> None:
    """Ctrl-C: the session's stdin closed, which the login node takes as Ctrl-C; its last lines shown."""
    try:  # communicate() closes stdin first
        out, _ = session.communicate(timeout=LEAVE_WAIT_S)
        print(out, end="", file=sys.stdout, flush=True)
    except subprocess.TimeoutExpired:
        session.kill()
        session.wait()
