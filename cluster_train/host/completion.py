"""`run-cluster completion bash`: a bash completion script made from the command table and the run parser, so that it
never lists a command or an option the CLI lacks. Cluster and experiment names are read from clusters/ and
experiments/ as you type (a cluster file added later completes too); a cluster's profiles from its file, through
`run-cluster completion profiles CLUSTER`."""
import shlex
import sys
from pathlib import Path
from typing import List

from cluster_train.shared.errors import UserError
from cluster_train.host import commands, project
from cluster_train.host.usage import Parser
from cluster_train.shared.yaml_file import load_yaml

# Commands whose next word is a cluster name; after `scaling CLUSTER` come that cluster's profiles.
CLUSTER_FIRST = ("doctor", "check-cluster", "scaling")

SCRIPT = """\
# bash completion of run-cluster: `eval "$(run-cluster completion bash)"` (in ~/.bashrc), or source this output.
_run_cluster_names() {  # the YAML files of a folder, without .yaml
    local f
    for f in "$1"/*.yaml; do [[ -e $f ]] && f=${f##*/} && echo "${f%%.yaml}"; done
}
_run_cluster() {
    local cur=${COMP_WORDS[COMP_CWORD]} first=${COMP_WORDS[1]} words=""
    COMPREPLY=()
    if [[ $cur == -* ]]; then
        words=%(options)s
    elif ((COMP_CWORD == 1)); then
        words="%(commands)s $(_run_cluster_names %(clusters)s)"
    elif ((COMP_CWORD == 2)) && [[ " %(cluster_first)s " == *" $first "* ]]; then
        words=$(_run_cluster_names %(clusters)s)
    elif ((COMP_CWORD >= 3)) && [[ $first == scaling ]]; then
        words="$(%(run_cluster)s completion profiles "${COMP_WORDS[2]}" 2>/dev/null) $(_run_cluster_names \
%(experiments)s)"
    elif [[ " %(commands)s " == *" $first "* ]]; then
        return 0  # a command's own arguments: run dirs and files (-o default)
    elif ((COMP_CWORD == 2)); then
        words=$(%(run_cluster)s completion profiles "$first" 2>/dev/null)
    elif ((COMP_CWORD == 3)); then
        words=$(_run_cluster_names %(experiments)s)
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _run_cluster run-cluster bin/run-cluster %(run_cluster)s
"""


def script() -> str:
    from cluster_train.host.submit import parser  # its options: what `run-cluster CLUSTER PROFILE --<TAB>` offers

    options = sorted({option for action in parser()._actions for option in action.option_strings})
    return SCRIPT % dict(options=shlex.quote(" ".join(options)), commands=" ".join(c.name for c in commands.COMMANDS),
                         cluster_first=" ".join(CLUSTER_FIRST), clusters=shlex.quote(str(project.CLUSTERS)),
                         experiments=shlex.quote(str(project.EXPERIMENTS)),
                         run_cluster=shlex.quote(str(project.ROOT / "bin" / "run-cluster")))


def profiles(cluster: str) -> List[str]:
    """The profile names of a cluster (a name in clusters/ or a file's path); none for one that cannot be read."""
    path = Path(cluster) if cluster.endswith((".yaml", ".yml")) else project.CLUSTERS / f"{cluster}.yaml"
    try:
        data = load_yaml(path, "cluster file")
    except UserError:
        return []
    found = data.get("profiles") if isinstance(data, dict) else None
    return sorted(str(name) for name in found) if isinstance(found, dict) else []


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster completion", description="print a bash completion script for run-cluster: commands, "
                                                          "options, clusters, profiles and experiments")
    p.add_argument("shell", choices=["bash", "profiles"], help="bash (or profiles CLUSTER, which the script calls)")
    p.add_argument("cluster", nargs="?", help="with profiles: the cluster whose profiles to list")
    args = p.parse_args(argv)
    if args.shell == "profiles":
        print("\n".join(profiles(args.cluster or "")))
    else:
        sys.stdout.write(script())
    return 0
