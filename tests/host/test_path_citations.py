"""Every repository path the host side cites exists (issue 55 item 15): in the job templates (whose comments land
in every generated script), messages, docstrings and comments. The scripts' comments cited train/host/fabric.py and
train/host/data/binding.py long after both moved to cluster_train/host/. A path from the checkout's root
(cluster_train/..., clusters/..., docs/...) or in one of cluster_train/host's rooms (jobs/memory.py) is looked for
from the root, from cluster_train/host and beside the file citing it. Pages of docs/ and their headings:
test_docs_citations.py."""
import re
import subprocess

from conftest import ROOT

HOST = ROOT / "cluster_train" / "host"
CITED_FROM = [*sorted(p for p in HOST.rglob("*") if p.suffix in (".py", ".j2")), ROOT / "bin" / "run-cluster",
              ROOT / "Makefile"]
# the checkout's own folders (not runs/, data/ or images/, which commands make)
TOP = "|".join(subprocess.run(["git", "ls-tree", "-d", "--name-only", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.split())
ROOMS = "|".join(p.name for p in sorted(HOST.iterdir()) if (p / "__init__.py").is_file())
FROM_ROOT = re.compile(rf"(?<![\w./$~{{-])((?:{TOP})/[\w./-]*\w)")
IN_A_ROOM = re.compile(rf"(?<![\w./$~{{-])((?:{ROOMS})/[\w./-]*\w\.(?:py|j2))\b")
METRIC = re.compile(r"^(train|val|test)/\w+$")  # train/loss, val/acc: a logged metric's name, not a path
EXAMPLES = {"experiments/x.yaml"}  # measured.py's docstring: a path as a user types it, not a file of the checkout


def placeholder(path: str) -> bool:
    """clusters/NAME.yaml, containers/FLAVOR.lock: a part in capitals stands for a name."""
    return any(part.split(".")[0].isupper() for part in path.split("/"))


def cited(text: str) -> set:
    return {m.group(1).rstrip(".") for m in FROM_ROOT.finditer(text)} | {m.group(1) for m in IN_A_ROOM.finditer(text)}


def test_every_path_the_host_side_cites_exists():
    missing, checked = [], 0
    for source in CITED_FROM:
        for path in sorted(cited(source.read_text())):
            if METRIC.match(path) or placeholder(path) or path in EXAMPLES:
                continue
            checked += 1
            if not any((base / path).exists() for base in (ROOT, HOST, source.parent)):
                missing.append(f"{source.relative_to(ROOT)}: {path}")
    assert checked > 200, checked  # the patterns still find the citations
    assert missing == [], "\n".join(missing)


def test_the_patterns_find_a_templates_citation_and_leave_out_what_is_no_path():
    found = cited("# bound read-only (cluster_train/host/fabric.py); see jobs/memory.py, train/loss 0.69\n")
    assert found == {"cluster_train/host/fabric.py", "jobs/memory.py", "train/loss"}
    assert METRIC.match("train/loss") and placeholder("clusters/NAME.yaml") and not placeholder("clusters/gilbreth.yaml")
