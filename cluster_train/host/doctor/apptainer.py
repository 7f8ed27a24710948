"""The doctor's checks of Apptainer on this machine: found on PATH (after the cluster's modules), how it can start
containers for a user who is not root (its setuid starter, allowed by the apptainer.conf that `apptainer buildcfg`
names; or an unprivileged user namespace, made here to see), how it mounts SIF and data images, whether images can
be built here, and the current image started with `true`."""
import getpass
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Tuple

from cluster_train.host import apptainer
from cluster_train.host.doctor.check import OK, PROBLEM, WARNING, Check, last_line, run
from cluster_train.host.images.store import ImageRecord

RUN_TIMEOUT_S = 120  # `true` in the image: under a second with a mount, minutes where Apptainer must unpack the SIF
ALLOW_SETUID = re.compile(r"^\s*allow setuid\s*=\s*(\S+)", re.M)


@dataclass(frozen=True)
class Tools:
    path: str  # PATH as a job has it, after the cluster's modules
    exe: str  # apptainer's path; "" where it is not on that PATH or too old
    config: Dict[str, str]  # `apptainer buildcfg`: where it was installed and where its configuration is

    @classmethod
    def find(cls, path: str) -> "Tools":
        usable = not apptainer.problem(path)
        said = apptainer.buildcfg(path) if usable else ""
        exe = apptainer.command(path=path)[0] if usable else ""
        return cls(path, exe, dict(line.split("=", 1) for line in said.splitlines() if "=" in line))

    @property
    def env(self) -> Dict[str, str]:
        return {**os.environ, "PATH": self.path}

    @property
    def helpers(self) -> Path:
        """Where Apptainer keeps the programs it starts (starter-suid; squashfuse_ll where bundled)."""
        return Path(self.config.get("LIBEXECDIR", "/usr/libexec")) / "apptainer" / "bin"

    def helper(self, name: str) -> bool:
        return bool(shutil.which(name, path=self.path)) or (self.helpers / name).is_file()


def checks(tools: Tools) -> Iterator[Check]:
    yield check_apptainer(tools)
    if tools.exe:
        setuid = setuid_mode(tools)
        yield check_modes(setuid, userns_mode(tools))
        yield check_mounts(tools, setuid[0])
        yield check_builds()


def check_apptainer(tools: Tools) -> Check:
    said = apptainer.problem(tools.path)
    if said:
        return Check(PROBLEM, said,  # it names apptainer itself
                     "name the site's Apptainer module in your settings (modules: [apptainer]), or install it "
                     "(containers/install-apptainer.sh, as root)")
    return Check(OK, f"apptainer: {apptainer.version(tools.path)} ({tools.exe})")


def setuid_mode(tools: Tools) -> Tuple[bool, str]:
    """Whether Apptainer can start containers through its setuid starter: installed setuid root and allowed by its
    configuration file; (yes or no, why)."""
    starter = tools.helpers / "starter-suid"
    conf = Path(tools.config.get("APPTAINER_CONF_FILE")
                or Path(tools.config.get("SYSCONFDIR", "/etc")) / "apptainer" / "apptainer.conf")
    if not starter.is_file():
        return False, f"setuid: no starter-suid in {starter.parent}"
    mode = starter.stat()
    if mode.st_uid != 0 or not mode.st_mode & stat.S_ISUID:
        return False, f"setuid: {starter} is not setuid root"
    try:
        allowed = ALLOW_SETUID.findall(conf.read_text())
    except OSError as err:
        return False, f"setuid: its configuration {conf} cannot be read ({err.strerror})"
    if allowed and allowed[-1] != "yes":  # absent: Apptainer's default, yes
        return False, f"setuid: allow setuid = {allowed[-1]} in {conf}"
    return True, f"setuid ({starter}, allow setuid = yes in {conf})"


def userns_mode(tools: Tools) -> Tuple[bool, str]:
    """Whether a user who is not root can make a user namespace: the kernel's switches, then one made here."""
    limit, clone = (sysctl(name) for name in ("user/max_user_namespaces", "kernel/unprivileged_userns_clone"))
    if limit == "0":
        return False, "user namespaces: off (user.max_user_namespaces = 0)"
    if clone == "0":  # Debian's own switch; root may still make one, so unshare below would not tell
        return False, "user namespaces: root's only (kernel.unprivileged_userns_clone = 0)"
    unshare = shutil.which("unshare", path=tools.path)
    if not unshare:
        return True, f"user namespaces (max_user_namespaces {limit}; none made: no unshare here)"
    done = run([unshare, "--user", "true"], env=tools.env)
    if done.returncode != 0:
        return False, f"user namespaces: none can be made (unshare --user: {last_line(done)})"
    return True, f"user namespaces (max_user_namespaces {limit}, unshare --user works)"


def sysctl(name: str) -> str:
    """A kernel setting as /proc/sys shows it; "?" where this kernel has no such setting."""
    file = Path("/proc/sys") / name
    return file.read_text().strip() if file.is_file() else "?"


def check_modes(setuid: Tuple[bool, str], userns: Tuple[bool, str]) -> Check:
    """How a user who is not root starts containers, even where doctor runs as root: clusters run jobs as their
    users, and root's own privilege says nothing about what Apptainer lets them do."""
    ways = [said for works, said in (setuid, userns) if works]
    nots = [said for works, said in (setuid, userns) if not works]
    if not ways:
        return Check(PROBLEM, f"containers: Apptainer cannot start one for a user who is not root: {nots[0]}; "
                              f"{nots[1]}",
                     "ask the admins for unprivileged user namespaces (sysctl user.max_user_namespaces=15000; on "
                     "Debian and Ubuntu also kernel.unprivileged_userns_clone=1) or setuid Apptainer (the "
                     "apptainer-suid package, allow setuid = yes)")
    return Check(OK, f"containers: started unprivileged by {' and by '.join(ways)}"
                     + (f"; {nots[0]}" if nots else ""))


def check_mounts(tools: Tools, setuid: bool) -> Check:
    """How SIF and data images are mounted: by the kernel (root, setuid), else by squashfuse over /dev/fuse."""
    fuse = os.access("/dev/fuse", os.R_OK | os.W_OK)
    helpers = [name for name in ("squashfuse_ll", "squashfuse", "fuse2fs") if tools.helper(name)]
    said = f"/dev/fuse {'usable' if fuse else 'missing or not usable'}, {', '.join(helpers) or 'no squashfuse'}"
    if os.geteuid() == 0 or setuid:
        return Check(OK, f"image mounts: by the kernel ({'as root' if os.geteuid() == 0 else 'setuid'}; {said})")
    if fuse and any(name.startswith("squashfuse") for name in helpers):
        return Check(OK, f"image mounts: by squashfuse in a user namespace ({said})")
    return Check(WARNING, f"image mounts: in a user namespace Apptainer mounts images with squashfuse over /dev/fuse "
                          f"({said}): without them each job unpacks its SIF into a temporary sandbox (minutes, GBs "
                          f"of /tmp) and a data image (data.image) cannot be bound",
                 "ask the admins for squashfuse and a usable /dev/fuse, or setuid Apptainer; meanwhile read data "
                 "from a directory (data.root), not a data image")


def check_builds() -> Check:
    if os.geteuid() == 0:
        return Check(OK, "image builds: possible here (root)")
    user, uid = getpass.getuser(), str(os.getuid())
    try:
        mapped = any(line.split(":")[0] in (user, uid) for line in Path("/etc/subuid").read_text().splitlines())
    except OSError:
        mapped = False
    if mapped:
        return Check(OK, f"image builds: possible here with --fakeroot (/etc/subuid maps ids for {user})")
    # a warning: jobs need no build here, images come built from elsewhere
    return Check(WARNING, f"image builds: not here (not root, and /etc/subuid maps no ids for {user}, which "
                          f"--fakeroot needs)",
                 "build where you can (make image FLAVOR=...) and bring the SIF: bin/run-cluster images import "
                 "FILE.sif --expect-sha256 SHA256 (docs/how-to/images-across-machines.md)")


def check_runs(tools: Tools, record: ImageRecord) -> Check:
    """The image started as a job starts it, running `true`: every mount and namespace Apptainer needs, for real."""
    started = time.monotonic()
    done = run(apptainer.command("exec", "--cleanenv", "--no-home", record.path, "true", path=tools.path),
               timeout=RUN_TIMEOUT_S, env=tools.env)
    if done.returncode != 0:
        return Check(PROBLEM, f"apptainer exec: the {record.flavor} image does not start here: {last_line(done)}",
                     f"the containers and image mounts lines say what Apptainer lacks; apptainer --debug exec "
                     f"{record.path} true shows where it stops")
    return Check(OK, f"apptainer exec: the {record.flavor} image runs `true` ({time.monotonic() - started:.1f} s)")
