"""Every ```bash block of README.md and docs/**/*.md runs (issue 42): one test per block, named `page.md:LINE`.

The rule: a command that would queue a job (`bin/run-cluster CLUSTER PROFILE ...`, `--rerun`, `resume`, `scaling`,
`doctor --node`) runs with --dry-run, on every cluster (a real site is out of reach, and training on a test cluster
is other tests' work and over this file's budget); every other command runs as written, for real, against this
machine and the test clusters. A block marked `<!-- docs-test: not-run: REASON -->` on the line above its fence is
not run, and counted.

Each block runs in order, with `bash -euo pipefail`, in a sandbox: a clone of this checkout (with its uncommitted
changes) holding a private image store (each flavor's current image, hard-linked), data/ with stand-ins of the sets
the experiments read (enough for preflight; a block that generates a set writes it there), `runs/` with a real
finished run (`runs/<id>`: demo_run, the run `make demo` made in a clean clone; tests/cluster/conftest.py), and a
HOME of its own whose settings give every cluster the values its file needs. Nothing a block does reaches the
checkout, the shared image store (both checked once all ran) or ~/.config. Output need not match the ```text block
the page shows after it. tests/docs_blocks.py holds the extraction, the marks, the placeholders and the rule; the
counts of blocks run for real, as --dry-run and not run close the suite's report.
"""
import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict

import pytest
import suite_report
from conftest import DEFAULT_INPUTS, ROOT, stand_in_data
from docs_blocks import PLACEHOLDERS, collect, counts, fill, reason, runnable, with_dry_run
from cluster.conftest import clone_of_the_checkout

from cluster_train.host.commands import BY_NAME

pytestmark = pytest.mark.image
COMMANDS = tuple(BY_NAME)
BLOCKS = collect(ROOT)[0]  # their problems: tests/host/test_docs_blocks.py (make test-fast)
TIMEOUT_S = 60  # per block: `make image` once built, a dry run, a status answer in seconds


@dataclass
class Sandbox:
    checkout: Path
    env: Dict[str, str]
    values: Dict[str, str]  # placeholder -> its value here


def private_store(shared: Path, dest: Path) -> str:
    """An image store holding the shared store's current image of each flavor, hard-linked (no copy of gigabytes): what
    a block imports, derives, packs or verifies stays here. Returns the CPU image's sha256."""
    from dataclasses import asdict

    from cluster_train.host.images import store

    (dest / "store").mkdir(parents=True)
    items = []
    for flavor in sorted({record.flavor for record in store.records(shared)}):
        record = store.current(flavor, shared)
        items.append({**asdict(record), "path": f"store/{record.sha256}.sif"})
        for link in (dest / items[-1]["path"], dest / f"{flavor}.sif"):
            try:
                os.link(record.path, link)
            except OSError:  # another file system: a link to it (a block never writes into a stored image)
                link.symlink_to(record.path)
        if (shared / f"{flavor}.inputs").is_file():  # so `make image` finds it fresh
            shutil.copy2(shared / f"{flavor}.inputs", dest / f"{flavor}.inputs")
    (dest / "index.json").write_text(json.dumps(items, indent=2) + "\n")
    return store.current("cpu", dest).sha256


def reader_settings(home: Path) -> None:
    """The settings a reader has made by the time a page submits: each cluster file's `needs:` and the ${name} values
    it refers to (a directory here), so a dry run for any cluster passes that check."""
    from cluster_train.shared.yaml_file import load_yaml

    per_cluster = {}
    for path in sorted((ROOT / "clusters").glob("*.yaml")):
        values = {key: "docs-test" for key in load_yaml(path, "cluster file").get("needs") or ()}
        for name in set(re.findall(r"\$\{([a-z_]+)\}", path.read_text())):
            values[name] = str((home / "settings-dirs" / name))
            (home / "settings-dirs" / name).mkdir(parents=True, exist_ok=True)
        if values:
            per_cluster[path.stem] = values
    (home / ".config" / "cluster-train").mkdir(parents=True)
    (home / ".config" / "cluster-train" / "settings.yaml").write_text(json.dumps({"clusters": per_cluster}) + "\n")


@pytest.fixture(scope="module")
def sandbox(demo_run, cpu_image, tmp_path_factory):
    base = tmp_path_factory.mktemp("docs-blocks")
    checkout = base / "checkout"
    clone_of_the_checkout(checkout)
    for path, data_set in DEFAULT_INPUTS.items():  # the sets the experiments name: stand-ins that pass preflight
        stand_in_data(checkout / "data" / path.name, data_set)
    sha256 = private_store(ROOT / "images", checkout / "images")
    runs = checkout / "runs"
    shutil.copytree(demo_run, runs / demo_run.name, symlinks=True)
    shutil.copytree(demo_run, runs / f"{demo_run.name}-again", symlinks=True)
    reader_settings(base / "home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CT_", "MAKE", "MFLAGS", "XDG_CONFIG"))}
    # the compiled host modules stay in the user's cache (bin/run-cluster puts them there; nothing else goes there)
    env.update(HOME=str(base / "home"), XDG_CACHE_HOME=os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"))
    values = {"<id>": demo_run.name, "<id2>": f"{demo_run.name}-again", "<sha256>": sha256}
    assert set(values) == set(PLACEHOLDERS)
    before = outside_the_sandbox()
    yield Sandbox(checkout, env, values)
    assert outside_the_sandbox() == before, "a docs block changed the checkout or the shared image store"


def outside_the_sandbox() -> tuple:
    """What no block may change: the checkout's files (git's view of them) and the shared image store's index."""
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True)
    index = ROOT / "images" / "index.json"
    return status.stdout, index.read_bytes() if index.is_file() else b""


@pytest.fixture(scope="module", autouse=True)
def block_counts():
    """The three numbers the issue's resolution states, shown at the suite's end."""
    tally = counts(BLOCKS, COMMANDS)
    marked = [f"  {b.where}: {reason(b)}" for b in BLOCKS if b.info == "bash" and b.mark is not None]
    suite_report.NOTES["docs blocks (tests/cluster/test_docs_commands.py)"] = [
        f"{tally['real']} run for real, {tally['dry-run']} as --dry-run, {tally['not-run']} not run (marked):",
        *marked]


def run_block(script: str, sandbox: Sandbox) -> subprocess.CompletedProcess:
    """bash -euo pipefail in the sandbox's checkout, in a process group of its own: a timeout ends all of it."""
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=sandbox.checkout, env=sandbox.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(killed after {TIMEOUT_S} s)"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("block", runnable(BLOCKS), ids=lambda b: b.where)
def test_the_block_runs(block, sandbox):
    try:
        filled = fill(block, sandbox.values)
    except ValueError as err:
        filled, refused = None, str(err)
    if filled is None:  # outside the except: the report shows the refusal, not a chain of exceptions
        pytest.fail(refused, pytrace=False)
    script, dry = with_dry_run(filled, COMMANDS)
    done = run_block(script, sandbox)
    if done.returncode != 0:
        pytest.fail(f"{block.where} failed (exit {done.returncode}; run {'as --dry-run' if dry else 'for real'} in "
                    f"{sandbox.checkout}):\n{script}--- stdout (end) ---\n{done.stdout[-2000:]}\n--- stderr (end) ---\n"
                    f"{done.stderr[-2000:]}\nfix the command, or mark the block on the line above its fence: "
                    f"<!-- docs-test: not-run: REASON -->", pytrace=False)
