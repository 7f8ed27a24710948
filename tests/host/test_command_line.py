"""The command line a user can discover (issue 40): `run-cluster --help` lists every command, each answers its own
--help, bash completes commands, clusters and profiles, `pip install -e .` gives a `run-cluster` command, and a command
imports only what it needs (a dry run answers at once: benchmarks/cli_speed.py measures it)."""
import os
import subprocess
import sys
import tomllib

import pytest
from conftest import ROOT

RUN_CLUSTER = str(ROOT / "bin" / "run-cluster")
# Every command the CLI had before it listed them, and the one that completes them: --help must show each.
COMMANDS = ["status", "logs", "cancel", "resume", "runs", "fetch", "sync", "report", "compare", "scaling", "names",
            "images", "data", "probe-data", "doctor", "init-cluster", "check-cluster", "completion"]
GROUPS = ["run:", "watch:", "results:", "images and data:", "sites:"]


def command_line(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, RUN_CLUSTER, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_help_lists_every_command_in_its_group_one_line_each():
    done = command_line("--help")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("commands (run-cluster COMMAND --help for each):")[1].splitlines()
    assert [line.strip() for line in listed if line.strip().endswith(":")] == GROUPS
    named = {line.split()[0] for line in listed if line.startswith("    ")}
    assert set(COMMANDS) <= named and all(len(line) <= 120 for line in listed)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_its_own_help(command, capsys):
    from cluster_train.host import cli

    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--help"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith(f"usage: run-cluster {command} ")


def complete(script: str, line: str) -> list:
    """What bash offers at the end of `line` (COMP_WORDS as bash splits it), with the script sourced."""
    driver = (f'source {script}\nread -ra COMP_WORDS <<< "$1"\n[[ $1 == *" " ]] && COMP_WORDS+=("")\n'
              'COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n_run_cluster\nprintf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "--norc", "-c", driver, "bash", line], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_commands_clusters_profiles_and_options_from_the_parser(tmp_path):
    done = command_line("completion", "bash")
    assert done.returncode == 0, done.stderr
    script = tmp_path / "run-cluster.bash"
    script.write_text(done.stdout)
    assert complete(script, "bin/run-cluster gil") == ["gilbreth"]
    assert complete(script, "bin/run-cluster gilbreth n1_") == ["n1_gpu1", "n1_gpu2"]  # that cluster's profiles
    assert complete(script, "bin/run-cluster ci-slurm n1_gpu1 dem") == ["demo"]
    assert complete(script, "bin/run-cluster ci-slurm n1_gpu1 --dry") == ["--dry-run"]
    assert complete(script, "bin/run-cluster prob") == ["probe-data"]
    assert complete(script, "bin/run-cluster doctor ci-") == ["ci-lsf", "ci-slurm"]
    assert complete(script, "bin/run-cluster no_such_cluster ") == []  # an unreadable cluster offers nothing


def test_pip_install_gives_a_run_cluster_command():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["run-cluster"].split(":")
    from importlib import import_module

    assert import_module(module).__dict__[function].__doc__.startswith("bin/run-cluster")


def test_a_command_imports_only_its_own_modules():
    """`names --help` loads neither the job builder nor YAML nor Jinja; a dry run no report or image command."""
    probe = ("import sys; sys.argv[1:] = {argv!r}; from cluster_train.host.cli import main\ntry: "
             "main()\nexcept SystemExit: "
             "pass\nprint(' '.join(sorted(sys.modules)), file=sys.stderr)")
    loaded = {}
    for name, argv in (("names", ["names", "--help"]), ("dry run", ["ci-slurm", "n1_gpu1", "demo", "--dry-run"])):
        done = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        loaded[name] = set(done.stderr.splitlines()[-1].split())
    assert not {"cluster_train.host.jobs.build", "jinja2", "yaml"} & loaded["names"]
    assert "cluster_train.host.jobs.build" in loaded["dry run"]
    assert not {"cluster_train.host.reports.report", "cluster_train.host.images.commands",
                "cluster_train.host.views.table"} & loaded["dry run"]


def test_yaml_is_read_by_libyaml_and_its_errors_worded_by_pyyaml(monkeypatch):
    import yaml

    from cluster_train.shared.errors import UserError
    from cluster_train.shared.yaml_file import load_yaml_text

    assert yaml.__with_libyaml__  # the host requirements' PyYAML wheel brings it
    monkeypatch.setattr(yaml, "SafeLoader", None)  # a valid file never reaches the pure-Python loader
    assert load_yaml_text("a: [1, {b: 2}]\n", "f.yaml") == {"a": [1, {"b": 2}]}
    monkeypatch.undo()
    with pytest.raises(UserError, match=r"^f.yaml is not valid YAML: line 1, column 5: mapping values are not allowed"):
        load_yaml_text("a: b: c\n", "f.yaml")


def test_bytecode_goes_to_a_cache_folder_where_python_is_told_not_to_write_it(tmp_path):
    """PYTHONDONTWRITEBYTECODE (set on this machine) made every command compile its modules again: 0.6 s a dry run."""
    done = command_line("names", "--help", env={"PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "cluster-train" / "pycache").rglob("cli*.pyc"))
