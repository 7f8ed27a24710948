"""The bad-input corpus (tests/bad_inputs/*.yaml): every case is refused with one line, and nothing happens.

Each YAML file holds `cases:` (and optionally `base:`, an argv prefix for the cases that give `args`). A case:

    id:      unique name (the pytest id)
    argv:    the whole argv of bin/run-cluster; or
    args:    appended to the file's `base`
    expect:  fragments that must all appear in stderr (case-insensitive); may be empty
    files:   {relative path under {tmp}: text}   written before the run; text may be {bytes: "..."}
    dirs:    [relative path under {tmp}]          created before the run
    remove:  [relative path under {tmp}]          removed before the run (after the defaults are made)
    env:     {NAME: value}                        extra environment; a value may be {bytes: "..."}
    note:    why the case is there / what the right behaviour is (not read)

An argv element is a string, {bytes: "..."} (the text, placeholders filled, encoded as latin-1: one raw byte per
character, so "\\xff" is the byte 0xff) or {repeat: "a", times: 300, prefix: "", suffix: ""}. Placeholders in
argv, file names, file texts and env values: {tmp} (the case's scratch directory, also the working directory),
{root} (the project), {sha:<flavor>} (the stand-in image's sha256).

Before each case the runner makes, under {tmp}: an image store `images/` holding tiny stand-in images recorded for
cpu, cuda11.6 and cuda12.8 (CT_IMAGES), `settings.yaml` with `clusters: {gilbreth: {account: lusu}}`
(CT_SETTINGS), an empty `runs/` (CT_RUNS_DIR) and `data/`; a case's `files` replace them. The directory above
{tmp} holds fake sbatch/bsub/scontrol/squeue/bkill/scancel/bjobs first on PATH: each appends its argv to a
marker file and exits 1.

For every case: exit status 2; stderr is one non-empty line starting with `run-cluster: error:` that holds every
fragment; no "Traceback"; no scheduler command was called; nothing was created, removed or changed anywhere under
the case's directory (so `runs/` stays empty, a `--run-id ../../x` creates nothing beside it, and a
`$(touch {tmp}/PWNED)` payload creates nothing).

Each case runs both ways, in the same child: the command line, then the same request through the Python API
(cluster_train/host/api: Job(...).check() and .submit(), .dry_run() for a dry run, .sweep(), Job.rerun_of(...) and
rerun(); Run(...).status(), .logs(), .cancel(), .resume() and runs() for those commands), which must raise
ClusterTrainError with the command line's words (or check() return them), print nothing and change nothing either. Only
a case the API cannot express runs the command line alone, and says why: a command with no API by design (NO_API), or
the command line's own syntax (CLI_SYNTAX); test_only_what_the_api_cannot_express_is_skipped holds them to exactly that.

`python tests/host/test_bad_inputs.py [ID ...]` runs the corpus (or some cases) outside pytest and prints each failure.
"""
import io
import json
import os
import re
import shutil
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import forked
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "tests" / "bad_inputs"
REFUSALS = ROOT / "docs" / "reference" / "refusals.yaml"
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[\w.-]+-[0-9a-f]{4}\b")  # a new run's id: its time and random suffix
FLAVORS = ("cpu", "cuda11.6", "cuda12.8")
FAKE_SCHEDULER_COMMANDS = ("sbatch", "bsub", "scontrol", "squeue", "bkill", "scancel", "bjobs")
DEFAULT_SETTINGS = "clusters:\n  gilbreth: {account: lusu}\n"
CASE_KEYS = {"id", "argv", "args", "expect", "files", "dirs", "remove", "env", "note"}
TIMEOUT_S = 60
WORKERS = 3


def load_cases() -> List[dict]:
    cases, seen = [], set()
    for path in sorted(CORPUS.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        base = doc.get("base") or []
        for case in doc.get("cases") or []:
            unknown = set(case) - CASE_KEYS
            assert not unknown, f"{path.name}: case {case.get('id')!r} has unknown keys {sorted(unknown)}"
            assert case.get("id") and case["id"] not in seen, f"{path.name}: missing or repeated id {case.get('id')!r}"
            assert ("argv" in case) != ("args" in case and bool(base)), (
                f"{path.name}: {case['id']}: give argv, or args and a file base")
            seen.add(case["id"])
            argv = case["argv"] if "argv" in case else list(base) + list(case["args"])
            cases.append({**case, "argv": argv, "file": path.name})
    return cases


CASES = load_cases()


NO_API = "a command with no API by design: a tool of the command line beside the runs (images, data, sites, ...)"
NO_API_COMMANDS = ("images", "data", "probe-data", "sync", "fetch", "compare", "scaling", "doctor", "init-cluster",
                   "check-cluster", "completion", "names")
CLI_SYNTAX = "the command line's own syntax: the API's signatures have no place for it"
CLI_SYNTAX_CASES = ("argv-unknown-option", "rerun-with-a-cluster",  # a misspelt option; a CLUSTER beside --rerun
                    "search-with-a-sweep", "study-resume-with-a-set")  # Job.search, Study.resume: no sweep, no --set


@dataclass
class Result:
    rc: Optional[int]
    stdout: str
    stderr: str
    problems: List[str]
    api_skipped: str = ""  # why the case ran through the command line only
    said: str = ""  # the one line, as docs/reference/refusals.yaml keeps it (the case's own paths made relative)


def _fill(text: str, values: Dict[str, str]) -> str:
    return re.sub(r"\{(tmp|root|sha:[\w.]+)\}", lambda m: values.get(m.group(1), m.group(0)), text)


def _arg(item, values: Dict[str, str]):
    if isinstance(item, str):
        return _fill(item, values)
    if isinstance(item, dict) and "bytes" in item:
        return _fill(item["bytes"], values).encode("latin-1")
    if isinstance(item, dict) and "repeat" in item:
        return (_fill(item.get("prefix", ""), values) + item["repeat"] * item["times"]
                + _fill(item.get("suffix", ""), values))
    return str(item)  # numbers written unquoted in a case


def _content(item, values: Dict[str, str]) -> bytes:
    if isinstance(item, dict) and "bytes" in item:
        return _fill(item["bytes"], values).encode("latin-1")
    if isinstance(item, dict) and "repeat" in item:
        return _arg(item, values).encode()
    return _fill(str(item), values).encode()


def _snapshot(top: Path) -> Dict[str, Tuple]:
    """Every path under `top` (without following links) with its kind, size and mtime."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            found[str(path.relative_to(top))] = (st.st_mode >> 12, st.st_size if not path.is_dir() else 0,
                                                 st.st_mtime_ns if not path.is_dir() else 0)
    return found


def _setup(case: dict, case_root: Path) -> Tuple[Path, Dict[str, str], Path]:
    from cluster_train.host.images import store

    tmp = case_root / "t"
    fakebin = case_root / "fakebin"
    marker = case_root / "scheduler-called"
    for d in (tmp / "runs", tmp / "data", tmp / "sif", fakebin):
        d.mkdir(parents=True)
    for command in FAKE_SCHEDULER_COMMANDS:
        fake = fakebin / command
        fake.write_text(f'#!/bin/sh\necho "{command} $*" >> "{marker}"\nexit 1\n')
        fake.chmod(0o755)
    values = {"tmp": str(tmp), "root": str(ROOT)}
    for flavor in FLAVORS:
        sif = tmp / "sif" / f"{flavor}.sif"
        sif.write_text(f"stand-in {flavor} image\n")
        record = store.record(flavor, sif, ROOT / "pyproject.toml", ROOT / "pyproject.toml", root=tmp / "images",
                              git_commit="0" * 40)
        values[f"sha:{flavor}"] = record.sha256
    (tmp / "settings.yaml").write_text(DEFAULT_SETTINGS)
    for d in case.get("dirs") or []:
        (tmp / _fill(d, values)).mkdir(parents=True, exist_ok=True)
    for name, text in (case.get("files") or {}).items():
        path = tmp / _fill(name, values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_content(text, values))
    for name in case.get("remove") or []:
        path = tmp / _fill(name, values)
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return tmp, values, marker


@dataclass
class Prepared:
    """A case made ready to run: its directory, filled argv and environment, and the state to compare after."""

    case: dict
    tmp: Path
    values: Dict[str, str]
    marker: Path
    argv: List
    env: Dict[str, str]
    before: Dict[str, Tuple]
    root_pwned: bool
    output: Path  # beside the case directory, so writing it changes nothing under it


def prepare(case: dict, case_root: Path) -> Prepared:
    tmp, values, marker = _setup(case, case_root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LSB_", "CT_"))}
    env.update(CT_IMAGES=str(tmp / "images"), CT_SETTINGS=str(tmp / "settings.yaml"), CT_RUNS_DIR=str(tmp / "runs"),
               PATH=f"{case_root / 'fakebin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update({k: os.fsdecode(_arg(v, values)) for k, v in (case.get("env") or {}).items()})  # bytes as os.environ
    return Prepared(case, tmp, values, marker, [_arg(a, values) for a in case["argv"]], env, _snapshot(case_root),
                    (ROOT / "PWNED").exists(), case_root.with_name(case_root.name + ".out"))


def run_cases(cases: List[Tuple[dict, Path]]) -> List[Result]:
    """Each case in a child forked from this process with bin/run-cluster's code already imported: a process of
    its own, as bin/run-cluster is, without paying Python's start and the imports 146 times. Forked from this
    thread only (no thread pool: forking beside other threads can copy a held lock), WORKERS at a time."""
    results: List[Optional[Result]] = [None] * len(cases)
    pending, running = list(enumerate(cases)), {}
    while pending or running:
        while pending and len(running) < WORKERS:
            i, (case, case_root) = pending.pop(0)
            prepared = prepare(case, case_root)
            running[_fork(prepared)] = (i, case_root, prepared, time.monotonic())
        for pid, (i, case_root, prepared, started) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done and time.monotonic() - started > TIMEOUT_S:
                os.kill(pid, 9)
                done, status = os.waitpid(pid, 0)
                status = None
            if done:
                del running[pid]
                rc = None if status is None else os.waitstatus_to_exitcode(status)
                results[i] = judge(prepared, case_root, rc)
        time.sleep(0.002)
    return results


def _fork(prepared: Prepared) -> int:
    out, err = (os.open(prepared.output.with_suffix(suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                for suffix in (".stdout", ".stderr"))
    api = prepared.output.with_suffix(".api")
    try:
        return forked.start(prepared.argv, out, err, prepared.env, prepared.tmp,
                            then=lambda argv: api.write_text(json.dumps(api_outcome(argv))))
    finally:
        os.close(out)
        os.close(err)


def api_outcome(argv: List[str]) -> dict:
    """The case's request made through the API: what each call said (its ClusterTrainError's lines, check()'s
    problems) and whether it printed; or why the API cannot make it."""
    calls = api_calls(argv)
    if isinstance(calls, str):
        return {"skipped": calls}
    said, printed = {}, io.StringIO()
    for name, call in calls:
        with redirect_stdout(printed), redirect_stderr(printed):
            try:
                returned = call()  # check()'s problems; whatever else a call returns means it did not refuse
                said[name] = returned if isinstance(returned, list) and returned else ["(no error)"]
            except Exception as err:  # noqa: BLE001  a ClusterTrainError is the expected one; others are reported
                said[name] = list(getattr(err, "problems", [f"{type(err).__name__}: {err}"]))
    return {"said": said, "printed": printed.getvalue()}


def api_calls(argv: List[str]):
    """[(name, call)] making the command line's request through the API, or why it cannot be made there."""
    from cluster_train.host import cli, commands, submit
    from cluster_train.host.api import race
    from cluster_train.host.api.errors import ClusterTrainError
    from cluster_train.host.api.job import Job

    named = commands.find(argv)
    if named:
        return NO_API if named.name in NO_API_COMMANDS else run_calls(named.name, argv[1:])
    try:
        words, command = cli.split_command(argv)
        args = without_utf8_check(submit.parser()).parse_intermixed_args(words)
        race.sort_words(args)
    except (ClusterTrainError, SystemExit):
        return CLI_SYNTAX
    if args.search:  # as submit_command: --search before anything else it might stand beside
        return search_calls(args, command)
    if race.across(args):  # several clusters' runs: ct.first_to_start([Job, Job, ...])
        return race_calls(args, command)
    if args.rerun:
        return rerun_calls(args, command)
    if args.pipeline:
        return pipeline_calls(args, command)
    if not args.cluster or not (args.profile or args.first_to_start):
        return CLI_SYNTAX
    job = Job(args.cluster, args.first_to_start[0] if args.first_to_start else args.profile,
              (args.profile if args.first_to_start else None) or args.experiment, overrides=args.overrides,
              command=command, flavor=args.flavor, run_id=args.run_id, dev=args.dev,
              stale_image_ok=args.stale_image_ok, strict_budget=args.strict_budget)
    if args.sweeps or args.sweep_file or args.max_parallel is not None or args.first_to_start:
        def planned():
            plan = job._plan(dry_run=args.dry_run, sweeps=args.sweeps, sweep_file=args.sweep_file,
                            max_parallel=args.max_parallel, first_to_start=args.first_to_start, after=args.after)
            plan.discard() if args.dry_run else plan.queue()
        return [("plan", planned)]
    if args.dry_run:
        return [("dry_run", lambda: job.dry_run(after=args.after))]
    return [("check", job.check), ("submit", lambda: job.submit(after=args.after))]


def without_utf8_check(p):
    """The command line's parser without its refusal of bytes that are not UTF-8: the API must refuse them itself."""
    p.refuse_undecodable = lambda parsed: None
    return p


def run_calls(name: str, words: List[str]):
    """status|logs|cancel|resume RUN through Run(RUN), and `runs` through runs(), each command's options parsed by
    its own parser (RUN as given: Run() looks it up as the command line does)."""
    from cluster_train.host.api.errors import ClusterTrainError
    from cluster_train.host.api.run import Run, runs
    from cluster_train.host.views import commands as run_commands, table

    p = without_utf8_check(table.parser() if name == "runs" else run_commands.parser(name))
    for action in p._actions:  # RUN as given, not looked up while parsing: Run(RUN) must refuse it itself
        action.type = str if action.dest == "run_dir" else action.type
    try:
        args = p.parse_args(words)
    except (ClusterTrainError, SystemExit):
        return CLI_SYNTAX
    if name == "runs":
        return [("runs", lambda: runs(cluster=args.cluster, state=args.state))]
    if (Path(args.run_dir) / "study.json").is_file():  # a study: the command line's run_command asks the same
        return study_calls(name, args)
    calls = {"status": lambda: Run(args.run_dir).status(), "logs": lambda: Run(args.run_dir).logs(follow=args.follow),
             "cancel": lambda: Run(args.run_dir).cancel(),
             "resume": lambda: Run(args.run_dir).resume(profile=args.profile, overrides=args.overrides)}
    return [(name, calls[name])]


def search_calls(args, command):
    """--search FILE through Job(...).search(FILE, max_parallel, timeout_s=...): the API's search has no dry run (it
    queues once checked, so a refused case must refuse first), and is always driven here (wait=True: a case it
    wrongly took would not leave a background driver behind); a sweep, rerun, race, --after or pipeline beside it,
    or a missing profile, has no place in its signature."""
    from cluster_train.host.api.job import Job

    if not (args.cluster and args.profile) or args.sweeps or args.sweep_file or args.rerun or args.first_to_start \
            or args.after or args.pipeline:
        return CLI_SYNTAX
    job = Job(args.cluster, args.profile, args.experiment, overrides=args.overrides, command=command,
              flavor=args.flavor, run_id=args.run_id, dev=args.dev, stale_image_ok=args.stale_image_ok,
              strict_budget=args.strict_budget)
    return [("search", lambda: job.search(args.search, args.max_parallel, wait=True, timeout_s=args.timeout))]


def study_calls(name: str, args):
    """status|cancel|resume of a study's directory (it holds study.json) through Study(DIR): status(), cancel(),
    resume(timeout_s=...), driven here as search_calls' are; a study's logs (its driver.log, a file) and status
    --json have no API, nor has a study's resume a --profile, --set or --dry-run."""
    from cluster_train.host.api.study import Study

    if name == "logs" or (name == "status" and args.json) or (
            name == "resume" and (args.profile or args.overrides or args.dry_run)):
        return CLI_SYNTAX
    calls = {"status": lambda: Study(args.run_dir).status(), "cancel": lambda: Study(args.run_dir).cancel(),
             "resume": lambda: Study(args.run_dir).resume(wait=True, timeout_s=args.timeout)}
    return [(name, calls[name])]


def rerun_calls(args, command):
    """--rerun through Job.rerun_of(...): its dry_run(), or check(), rerun() (its submit()) and Run(RUN).rerun(); a
    cluster, profile, flavor, sweep or command beside --rerun has no place in the API's signature."""
    from cluster_train.host.api.job import Job, rerun
    from cluster_train.host.api.run import Run

    if command or args.cluster or args.flavor or args.first_to_start or args.dev or (
            args.sweeps or args.sweep_file or args.max_parallel is not None):
        return CLI_SYNTAX
    made = Job.rerun_of(args.rerun, args.overrides, run_id=args.run_id, stale_image_ok=args.stale_image_ok,
                        strict_budget=args.strict_budget)
    if args.dry_run:
        return [("dry_run", lambda: made.dry_run(after=args.after))]
    calls = [("check", made.check), ("rerun", lambda: rerun(args.rerun, args.overrides, run_id=args.run_id,
                                                             stale_image_ok=args.stale_image_ok,
                                                             strict_budget=args.strict_budget, after=args.after))]
    if not (args.run_id or args.stale_image_ok or args.strict_budget or args.after):  # Run.rerun takes overrides only
        calls.append(("Run.rerun", lambda: Run(args.rerun).rerun(args.overrides)))
    return calls


def race_calls(args, command):
    """--first-to-start CLUSTER:PROFILE ... through ct.first_to_start([Job(CLUSTER, PROFILE, ...), ...]); a dry run,
    a command or a --run-id beside it has no place in its signature."""
    from cluster_train.host.api import race
    from cluster_train.host.api.job import Job

    if args.dry_run or command or args.run_id:
        return CLI_SYNTAX

    def raced():
        experiment = race.experiment_of([args.cluster, args.profile, args.experiment])
        jobs = [Job(entry.cluster, entry.profile, experiment, overrides=args.overrides, flavor=args.flavor,
                    dev=args.dev, stale_image_ok=args.stale_image_ok) for entry in race.entries_of(args.first_to_start)]
        return race.first_to_start(jobs, timeout_s=args.timeout)
    return [("first_to_start", raced)]


def pipeline_calls(args, command):
    """--pipeline through the API: Pipeline(...).dry_run() or .check() and .submit(), after the same option check."""
    from cluster_train.host import submit
    from cluster_train.host.api.pipeline import Pipeline, refuse_options

    def made() -> Pipeline:
        refuse_options(args.cluster, submit.pipeline_extras(args, command))
        return Pipeline(args.cluster, args.pipeline, overrides=args.overrides, run_id=args.run_id, dev=args.dev,
                        stale_image_ok=args.stale_image_ok)

    if args.dry_run:
        return [("dry_run", lambda: made().dry_run())]
    return [("check", lambda: made().check()), ("submit", lambda: made().submit())]


def api_problems(prepared: Prepared, stderr: str) -> Tuple[List[str], str]:
    """Where the API's words differ from the command line's, or it printed; and why it was skipped, if it was."""
    found = prepared.output.with_suffix(".api")
    if not found.is_file():
        return ["the API side did not finish"], ""
    outcome = json.loads(found.read_text())
    if "skipped" in outcome:
        return [], outcome["skipped"]
    cli_lines = [line.split("run-cluster: error: ", 1)[-1] for line in stderr.splitlines() if line.strip()]
    problems = [f"the API's {name}() said {lines!r}, the command line {cli_lines!r}"
                for name, lines in outcome["said"].items() if unnamed(lines) != unnamed(cli_lines)]
    if outcome["printed"]:
        problems.append(f"the API printed {outcome['printed'][:300]!r}")
    return problems, ""


def unnamed(lines: List[str]) -> List[str]:
    """Lines with each generated run id (time, cluster, profile, random suffix) as one placeholder."""
    return [re.sub(r"\b\d{8}-\d{6}-[\w.+-]+-[0-9a-f]{4}\b", "<run-id>", line) for line in lines]


def judge(prepared: Prepared, case_root: Path, rc: Optional[int]) -> Result:
    case, tmp, values, marker = prepared.case, prepared.tmp, prepared.values, prepared.marker
    out, err = (prepared.output.with_suffix(suffix).read_bytes() for suffix in (".stdout", ".stderr"))
    stdout, stderr = out.decode("utf-8", "backslashreplace"), err.decode("utf-8", "backslashreplace")
    problems = []
    if rc is None:
        problems.append(f"did not finish within {TIMEOUT_S} s")
    elif rc != 2:
        problems.append(f"exit status {rc}, not 2")
    lines = [line for line in stderr.splitlines() if line.strip()]
    if len(lines) != 1 or stderr.strip("\n") != lines[0]:
        problems.append(f"stderr has {len(lines)} non-empty line(s), not exactly one")
    if not lines or not lines[0].startswith("run-cluster: error:"):
        problems.append("stderr does not start with 'run-cluster: error:'")
    for fragment in case.get("expect") or []:
        if _fill(str(fragment), values).lower() not in stderr.lower():
            problems.append(f"stderr lacks {fragment!r}")
    if "Traceback" in stdout + stderr:
        problems.append("a Traceback was printed")
    if marker.exists():
        problems.append(f"a scheduler command was called: {marker.read_text().strip()!r}")
    runs = tmp / "runs"
    if not runs.is_dir() or any(runs.iterdir()):
        problems.append("the runs dir is not empty: "
                        f"{sorted(p.name for p in runs.iterdir()) if runs.is_dir() else 'gone'}")
    before, after = prepared.before, _snapshot(case_root)
    created = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    if any(Path(p).name == "PWNED" for p in created) or (not prepared.root_pwned and (ROOT / "PWNED").exists()):
        problems.append("a shell payload ran: PWNED was created")
    for what, paths in (("created", created), ("removed", removed), ("changed", changed)):
        if paths:
            problems.append(f"{what} under the case dir: {paths[:5]}{' ...' if len(paths) > 5 else ''}")
    api, skipped = api_problems(prepared, stderr)
    return Result(rc, stdout, stderr, problems + api, skipped, said_line(stderr, tmp))


def said_line(stderr: str, tmp: Path) -> str:
    """The error line without its prefix, the case's scratch directory written as the user's (`.`) and the checkout
    as `<checkout>`: what the troubleshooting page shows for the case."""
    first = next((line for line in stderr.splitlines() if line.strip()), "")
    said = first.removeprefix("run-cluster: error: ")
    for path, shown in ((str(tmp), "."), (str(ROOT), "<checkout>"), (str(tmp.parent.parent), "<tmp>")):
        said = said.replace(path + "/", "" if shown == "." else shown + "/").replace(path, shown)
    return RUN_ID.sub("<id>", said)


def describe(case: dict, result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()] or ["(empty stderr)"]
    shown = lines[-1] if "Traceback" in result.stderr else lines[0]  # a traceback's last line is its cause
    return f"{case['id']} [{case['file']}]: rc={result.rc}; {shown[:300]}\n    " + "\n    ".join(result.problems)


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    """Run the selected cases a few at a time (each a forked child), once per module."""
    wanted = [item.callspec.params["case"]["id"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_bad_input" and hasattr(item, "callspec")]
    import tempfile

    by_id = {case["id"]: case for case in CASES}
    # the same length of path every run (not pytest-N's counter, nor case9 against case10): a line that cuts a long
    # value at a width shows the same characters of it, as refusals.yaml holds them
    # (pytest-of-USER, above pytest-N and above pytest-xdist's pytest-N/popen-gwK alike)
    temp = tmp_path_factory.getbasetemp()
    top = next((p for p in temp.parents if p.name.startswith("pytest-of-")), temp.parent)
    base = Path(tempfile.mkdtemp(prefix="bad-inputs-", dir=top))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    done = run_cases([(by_id[cid], base / f"case{i:04d}") for i, cid in enumerate(wanted)])
    return dict(zip(wanted, done))


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_bad_input(case, results):
    result = results[case["id"]]
    if result.problems:
        pytest.fail(
            f"{case['file']}: argv {case['argv']!r}\n" + "\n".join(result.problems)
            + f"\n--- exit {result.rc}; stderr:\n{result.stderr[-3000:]}\n--- stdout:\n{result.stdout[-1500:]}",
            pytrace=False,
        )


def test_only_what_the_api_cannot_express_is_skipped(results):
    """Every case goes both ways but a command with no API by design and the command line's own syntax, named: a new
    case of a submission or of a run's command can never run the command line alone unnoticed."""
    by_id = {case["id"]: case for case in CASES}
    skipped = {cid: result.api_skipped for cid, result in results.items() if result.api_skipped}
    expected = {cid: NO_API if by_id[cid]["argv"][0] in NO_API_COMMANDS else CLI_SYNTAX for cid in results
                if by_id[cid]["argv"][0] in NO_API_COMMANDS or cid in CLI_SYNTAX_CASES}
    assert skipped == expected


def test_the_troubleshooting_page_shows_each_refusal_as_it_is_said(results):
    """docs/reference/refusals.yaml, which the troubleshooting page lists, holds each case's line as the command line
    says it now: a changed message fails here until `make golden` writes it again (review the diff)."""
    kept = yaml.safe_load(REFUSALS.read_text()) if REFUSALS.is_file() else {}
    said = {cid: result.said for cid, result in results.items()}
    if os.environ.get("CT_UPDATE_GOLDEN"):
        every = {case["id"] for case in CASES}
        kept = {cid: line for cid, line in {**kept, **said}.items() if cid in every}
        REFUSALS.write_text(yaml.safe_dump(dict(sorted(kept.items())), width=10**6, allow_unicode=True))
    stale = {cid: (kept.get(cid), line) for cid, line in said.items() if kept.get(cid) != line}
    assert not stale, f"{REFUSALS} is not what the cases say now (make golden): {stale}"
    assert set(kept) <= {case["id"] for case in CASES}, "refusals.yaml names cases the corpus no longer has"


def main(ids: List[str]) -> int:
    import tempfile

    chosen = [case for case in CASES if not ids or case["id"] in ids]
    with tempfile.TemporaryDirectory() as base:
        done = run_cases([(case, Path(base) / f"case{i:04d}") for i, case in enumerate(chosen)])
    failing = [(case, result) for case, result in zip(chosen, done) if result.problems]
    for case, result in failing:
        print(describe(case, result))
    print(f"{len(chosen)} cases, {len(chosen) - len(failing)} passing, {len(failing)} failing")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
