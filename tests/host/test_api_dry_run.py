"""The API's dry run is the command line's: for every golden case of test_golden_scripts.py (each profile of each
cluster, the seeds' experiments, the sweeps), Job(...).dry_run().script is byte for byte the script `run-cluster ...
--dry-run` prints, with the same summary and warnings, and writes nothing."""
import re

import pytest
from host.test_golden_scripts import (  # noqa: F401 (env: the golden tests' fixture, used by name)
    EXPERIMENT, ROOT, SEED_RUNS, SMALL_CLUSTERS, SWEEP_RUNS, env, every_profile)

from cluster_train.shared import config as cfg
from cluster_train.host import cli, submit
from cluster_train.host.api.job import DryRun, Job
from cluster_train.host.runs.sweep import parse_axes

BANNER = " (dry run: nothing submitted) ---\n"


def profile_case(cluster: str, profile: str) -> list:
    experiment = EXPERIMENT.get(f"{cluster}/{profile}") or EXPERIMENT.get(cluster) or (
        "demo" if cluster in SMALL_CLUSTERS else "cifar100_resnet")
    return [cluster, profile, experiment]


CASES = {**{f"{c}/{p}": profile_case(c, p) for c, p in every_profile()},
         **{f"experiments/{name}": argv for name, argv in SEED_RUNS.items()},
         **{f"sweeps/{name}": argv for name, argv in SWEEP_RUNS.items()}}


def api_dry_run(argv: list) -> DryRun:
    """The same request through the API: overrides as a mapping of the values a Python caller writes (the --set
    words typed as the command line types them), sweeps as {key: values}."""
    words, command = cli.split_command(argv)
    args = submit.parser().parse_intermixed_args(words)
    overrides = cfg.parse_settings(args.overrides)
    job = Job(args.cluster, args.profile, args.experiment, overrides=overrides, command=command, run_id="golden")
    if args.sweeps:
        axes = {key: [cfg.typed_setting(key, word) for word in words] for key, words in parse_axes(args.sweeps)}
        return job.dry_run(sweep=axes, max_parallel=args.max_parallel)
    return job.dry_run()


def estimated(summary: str) -> str:
    """The start estimate is asked of the scheduler twice, a moment apart: the same line, perhaps another second and,
    on a cluster busy with other tests' jobs, another node."""
    return re.sub(r"^(start: Slurm expects it at )\S+ on \S+", r"\1<time> on <nodes>", summary, flags=re.M)


@pytest.mark.parametrize("name", list(CASES))
def test_the_api_dry_run_is_the_command_line_s(env, name, monkeypatch, capsys):
    variables, tmp = env
    for variable in ("CT_IMAGES", "CT_SETTINGS", "CT_RUNS_DIR"):
        monkeypatch.setenv(variable, variables[variable])
    monkeypatch.chdir(ROOT)  # the seeds' experiment paths, as a user in the checkout types them
    argv = CASES[name]
    at = argv.index("--") if "--" in argv else len(argv)
    assert cli.main([*argv[:at], "--dry-run", "--run-id", "golden", *argv[at:]]) == 0
    out, err = capsys.readouterr()
    shown = api_dry_run(argv)
    assert capsys.readouterr() == ("", "")  # the API printed nothing
    summary, _, script = out.partition(BANNER)
    assert shown.script == script
    assert estimated(shown.summary) == estimated(summary.rsplit("\n---", 1)[0])
    assert [f"run-cluster: {w}" for w in shown.warnings] == err.splitlines()
    assert shown.config["output_dir"].endswith("golden") or "sweeps/" in name
    assert not any((tmp / "runs").iterdir()) if (tmp / "runs").is_dir() else True  # nothing written
