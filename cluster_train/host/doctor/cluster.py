"""The doctor's checks of what the cluster file and your settings ask of this machine: the settings file itself, the
settings the cluster `needs:`, its modules, its scheduler's commands, and the account and QOS jobs are charged to."""
import getpass
import os
import shlex
import shutil
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import project, settings
from cluster_train.host.clusters import Cluster
from cluster_train.host.doctor.check import OK, PROBLEM, WARNING, Check, last_line, run
from cluster_train.host.schedulers import adapter, serves_another

PING_TIMEOUT_S = 20  # the controller answers in milliseconds; a real submission gives up after about as long


def check_settings(cluster: Cluster) -> Tuple[Check, Optional[Dict[str, Any]]]:
    """The settings file loads and every key in it is read by something: (the check, the settings, None where
    they did not load)."""
    try:
        file, user = settings.path(), settings.load(cluster.name)
    except UserError as err:
        return Check(PROBLEM, f"settings: {err}"), None
    if not file.is_file():
        return Check(OK, f"settings: no file at {file}, none needed so far"), user
    unread = settings.unread_keys(referenced_settings(cluster))
    if unread:
        keys = ", ".join(sorted({*settings.BUILT_IN, *settings.PATHS}))
        return Check(WARNING, f"settings {file}: {', '.join(unread)} read by nothing (not a key of cluster-train, and "
                              f"no cluster file refers to it as ${{name}})",
                     f"correct its spelling or remove it (cluster-train's keys: {keys})"), user
    return Check(OK, f"settings {file}: loads, every key known"), user


def referenced_settings(cluster: Cluster) -> Set[str]:
    """The ${name}s of every cluster file: a top-level setting may be there for any of them."""
    files = set(project.CLUSTERS.glob("*.yaml")) | {Path(cluster.path)}
    return {name for file in files for name in settings.references(file.read_text())}


def check_needs(cluster: Cluster, user: Dict[str, Any]) -> Check:
    missing = [key for key in cluster.needs if user.get(key) in (None, "")]
    if missing:
        keys = ", ".join(f"{key}: ..." for key in missing)
        return Check(PROBLEM, f"needs: {cluster.path} needs your {', '.join(missing)}, which your settings lack",
                     f"set it in {settings.path()} as clusters: {{{cluster.name}: {{{keys}}}}}")
    if not cluster.needs:
        return Check(OK, "needs: the cluster file needs no setting of yours")
    return Check(OK, f"needs: {', '.join(cluster.needs)} set")


def module_shell(cluster: Cluster, commands: List[str]):
    """`commands` in a login shell, as a batch shell runs them: `module` comes from the shell's profile (Lmod,
    Environment Modules), or from module_init where the site's batch shells start without it."""
    init = f"source {shlex.quote(cluster.module_init)} && " if cluster.module_init else ""
    return run(["bash", "-lc", f"set +u; {init}" + " && ".join(commands)], timeout=60)


def check_modules(cluster: Cluster, user: Dict[str, Any]) -> Iterator[Check]:
    wanted = cluster.modules + settings.modules(user)
    if not wanted:
        yield Check(OK, "modules: no modules")
        return
    if cluster.module_init and not Path(cluster.module_init).is_file():
        yield Check(PROBLEM, f"modules: module_init {cluster.module_init} of {cluster.path} does not exist",
                    "set module_init: to the module system's init script (e.g. /usr/share/lmod/lmod/init/bash)")
        return
    if module_shell(cluster, ["type module >/dev/null"]).returncode != 0:
        yield Check(PROBLEM, f"modules: a login shell here has no module command to load {', '.join(wanted)}",
                    f"name the module system's init script as module_init: in {cluster.path}, or drop modules:")
        return
    for module in wanted:
        done = module_shell(cluster, [f"module load {shlex.quote(module)}"])
        if done.returncode != 0 or "error" in done.stderr.lower():  # some module systems fail with status 0
            yield Check(PROBLEM, f"modules: module load {module} fails: {last_line(done)}",
                        f"module avail lists what loads; fix modules: in {cluster.path} or your settings")
        else:
            yield Check(OK, f"modules: module load {module} works")


def module_path(cluster: Cluster, user: Dict[str, Any]) -> str:
    """PATH as a job has it after its `module load`s (Apptainer and the scheduler's commands may come from a module,
    as narval's `module load apptainer`); this shell's PATH where no module is named or loading them fails."""
    wanted = cluster.modules + settings.modules(user)
    here = os.environ.get("PATH", "")
    if not wanted or (cluster.module_init and not Path(cluster.module_init).is_file()):
        return here
    loads = [f"module load {shlex.quote(module)} >/dev/null 2>&1" for module in wanted]
    done = module_shell(cluster, loads + ['printf "\\n%s" "$PATH"'])
    return done.stdout.splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else here


def check_scheduler(cluster: Cluster, path: str) -> Check:
    scheduler = adapter(cluster.scheduler)
    if not scheduler.commands:
        return Check(OK, f"scheduler: {scheduler.name} runs jobs on this machine, no commands needed")
    missing = [command for command in scheduler.commands if not shutil.which(command, path=path)]
    if missing:
        return Check(PROBLEM, f"scheduler: {', '.join(missing)} not on PATH",
                     f"run doctor on {cluster.name}'s login node, or load the module that brings {scheduler.name}")
    found = ", ".join(scheduler.commands)
    silent = controller_silent(scheduler, path)
    if silent:  # every sbatch would wait out its own timeouts, then fail: a problem, not a warning
        return Check(PROBLEM, f"scheduler: {found} here, but {silent}",
                     f"no job can be queued until it answers: ask the site whether {scheduler.controller} is down, "
                     f"or fix the configuration this shell's {scheduler.name} commands read")
    elsewhere = serving_another(cluster)
    if elsewhere:  # a warning: a shipped file names no scheduler_cluster, and its own site's ClusterName differs
        return Check(WARNING, f"scheduler: {found} here, but {elsewhere}",
                     f"if this is {cluster.name}'s login node, set scheduler_cluster: {scheduler.cluster_here()} in "
                     f"{cluster.path}; if not, run doctor there, or reach it over SSH (ssh: in your settings)")
    tool = scheduler.version_command
    if not tool or not shutil.which(tool[0], path=path):
        return Check(WARNING, f"scheduler: {found} here, but no {tool[0] if tool else 'command'} to tell "
                              f"{scheduler.name}'s version (a stand-in, or its tools only partly on PATH)",
                     f"put all of {scheduler.name}'s bin directory on PATH")
    done = run(list(tool), env={**os.environ, "PATH": path})
    version = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else last_line(done)
    answers = f"; {scheduler.controller} answers" if scheduler.ping_command else ""
    return Check(OK, f"scheduler: {found} here; {version}{answers}")


def serving_another(cluster: Cluster) -> str:
    """Why this machine's scheduler is not the cluster's (it serves another one); "" where it is, or cannot say."""
    return serves_another(cluster.scheduler, cluster.scheduler_cluster or cluster.name, cluster.path)


def controller_silent(scheduler, path: str) -> str:
    """Why the scheduler's controller did not answer its ping within PING_TIMEOUT_S; "" where it did, or where
    nothing asks it (a scheduler with no controller, its ping command not on PATH)."""
    tool = scheduler.ping_command
    if not tool or not shutil.which(tool[0], path=path):
        return ""
    done = run(list(tool), timeout=PING_TIMEOUT_S, env={**os.environ, "PATH": path})
    if done.returncode == 0:
        return ""
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip() and not line.startswith("*")]
    return f"{scheduler.controller} does not answer ({' '.join(tool)}: {said[0] if said else last_line(done)})"


def check_account(cluster: Cluster, user: Dict[str, Any]) -> Iterator[Check]:
    """The account your settings name is one you may charge, and every QOS the cluster's profiles ask for is
    allowed to it; where the scheduler cannot be asked, said so."""
    scheduler, account, who = adapter(cluster.scheduler), user.get("account"), getpass.getuser()
    allowed = None if serving_another(cluster) else scheduler.associations()  # another cluster's accounts say nothing
    if allowed is None:
        yield Check(OK, f"account: {account!r}, not checked: {scheduler.name} cannot be asked here which accounts are "
                        f"{who}'s (it decides at submission)" if account else "account: none set")
        return
    if not allowed:
        yield Check(WARNING, f"account: {scheduler.name}'s accounting lists no account for {who}",
                    "ask the site to add you to an account, then set account: in your settings")
        return
    if account and account not in allowed:
        yield Check(PROBLEM, f"account: {account!r} (your settings for {cluster.name}) is not one {who} may use "
                             f"(yours: {', '.join(allowed)})",
                    f"set account: to one of them in {settings.path()}, e.g. clusters: {{{cluster.name}: "
                    f"{{account: {next(iter(allowed))}}}}}")
        return
    yield Check(OK, f"account: {account} is {who}'s" if account else
                f"account: none set, {scheduler.name} charges {who}'s default (yours: {', '.join(allowed)})")
    yield check_qos(cluster, allowed, account)


def check_qos(cluster: Cluster, allowed: Dict[str, Tuple[str, ...]], account: Optional[str]) -> Check:
    wanted: Dict[str, List[str]] = {}
    for profile in cluster.profiles.values():
        if profile.qos:
            wanted.setdefault(profile.qos, []).append(profile.name)
    if not wanted:
        return Check(OK, "QOS: no profile asks for one")
    # no account set: the scheduler's default is one of the user's accounts, whichever it is
    may = set(allowed[account]) if account else {qos for listed in allowed.values() for qos in listed}
    refused = {qos: names for qos, names in wanted.items() if may and qos not in may}
    if refused:
        named = "; ".join(f"{qos} (profiles {', '.join(names)})" for qos, names in refused.items())
        return Check(WARNING, f"QOS: {named} not allowed {f'to account {account}' if account else 'to you'} "
                              f"(allowed: {', '.join(sorted(may))}), so those profiles are refused at submission",
                     "ask the site for that QOS, set another account:, or use other profiles")
    return Check(OK, f"QOS: {', '.join(wanted)} allowed" + ("" if may else " (the accounting lists no QOS limits)"))
