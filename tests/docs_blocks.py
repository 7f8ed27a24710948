"""The shell blocks of README.md and docs/**/*.md, and how tests/cluster/test_docs_commands.py runs each (issue 42).

A command a user types is fenced as ```bash; every such block is run. The line right above its fence may say
`<!-- docs-test: not-run: REASON -->` (a block that can neither run here nor as a dry run: it installs on a real
cluster, needs `ssh login.example.edu`, ...): it is not run, and counted. What else a block may hold:
- the placeholders of PLACEHOLDERS, filled with real values (`runs/<id>`: a real finished run);
- commands that would queue a job: they get --dry-run (the mode rule, `with_dry_run`).
Pure text work: no cluster, no image (tests/host/test_docs_blocks.py checks it in make test-fast).
"""
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"^\s*<!--\s*docs-test:\s*not-run:(?P<reason>.*?)-->\s*$")
ANY_MARK = re.compile(r"<!--\s*docs-test")  # a misspelt mark is refused, not silently ignored
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)")
# fences the convention forbids for commands: a command fenced so would escape the test
SHELL_LIKE = {"console", "shell", "sh", "zsh", "shell-session", "shellsession", "bash-session", "terminal"}
# a CommonMark indented code block that starts like a command: invisible to the test, so refused
INDENTED_COMMAND = re.compile(r"^ {4,}(\$ |# |bin/run-cluster\b|make\b|apptainer\b|python3?\b|git\b|cd\b|export\b)")
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9-]*>")
# placeholder -> what the test puts there; content writers use only these (or mark the block)
PLACEHOLDERS = {
    "<id>": "the id of a real finished run (the demo run), copied into the sandbox's runs/: runs/<id> is its directory",
    "<id2>": "the id of a second finished run (the same run copied under another id): compare runs/<id> runs/<id2>",
    "<sha256>": "the sha256 of the CPU image in the sandbox's image store (images list shows it)",
}
# bin/run-cluster commands that queue a job besides a submission (CLUSTER PROFILE ...) and --rerun; doctor only with
# --node (a short job on the nodes)
QUEUING = ("resume", "scaling", "doctor")
# bin/run-cluster by any path (../../bin/run-cluster from a project's directory), or on PATH
RUN_CLUSTER = re.compile(r"(?<![\w./~-])[\w./~-]*run-cluster(?P<gap>(?:[ \t]|\\\n)+)(?P<first>[^\s;|&)`\"']*)"
                         r"(?P<rest>(?:\\\n|[^\n;|&)`])*)")
MODES = ("real", "dry-run", "not-run")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    info: str  # the fence's language, lower case
    text: str
    mark: Optional[str]  # the line above the fence when it is a docs-test mark, else None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages(root: Path = ROOT) -> List[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def extract(text: str, page: str) -> Tuple[List[Block], List[int]]:
    """Every fenced block of a page, and where (1-based) each indented code block that looks like commands starts."""
    lines = text.splitlines()
    blocks, outside, i = [], [], 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            outside.append(i)
            i += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        closing = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), len(lines))
        body = [line[min(indent, len(line) - len(line.lstrip(" "))):] for line in lines[i + 1:end]]
        above = lines[i - 1] if i and ANY_MARK.search(lines[i - 1]) else None
        blocks.append(Block(page, i + 1, opened["info"].lower(), "\n".join(body) + "\n", above))
        i = end + 1
    indented = [n + 1 for n in outside if INDENTED_COMMAND.match(lines[n]) and (n == 0 or not lines[n - 1].strip())]
    return blocks, indented


def reason(block: Block) -> str:
    found = MARK.match(block.mark or "")
    return found["reason"].strip() if found else ""


def problems(blocks: List[Block], indented: Dict[str, List[int]]) -> List[str]:
    """What the convention refuses, one line each, naming the page and line and the fix."""
    found = [f"{page}:{n}: an indented code block that starts like a command is never run by the docs test; fence it "
             f"as ```bash" for page, lines in indented.items() for n in lines]
    for block in blocks:
        if block.info in SHELL_LIKE:
            found.append(f"{block.where}: a ```{block.info} block is never run by the docs test; fence commands as "
                         f"```bash and their output as ```text")
        elif block.mark is not None and block.info != "bash":
            found.append(f"{block.where}: a docs-test mark above a ```{block.info or '(no language)'} block, which the "
                         f"test does not run anyway; remove the mark")
        elif block.mark is not None and not reason(block):
            found.append(f"{block.where}: the mark {block.mark.strip()!r} gives no reason; write "
                         f"<!-- docs-test: not-run: REASON --> saying why this block can neither run nor dry-run here")
    return found


def collect(root: Path = ROOT) -> Tuple[List[Block], List[str]]:
    """Every block of README.md and docs/**/*.md, and the problems of all of them."""
    blocks, indented = [], {}
    for path in pages(root):
        if path.is_file():
            page = str(path.relative_to(root))
            found, indented[page] = extract(path.read_text(), page)
            blocks += found
    return blocks, problems(blocks, indented)


def runnable(blocks: List[Block]) -> List[Block]:
    """The blocks the test runs: ```bash, not marked."""
    return [b for b in blocks if b.info == "bash" and b.mark is None]


def fill(block: Block, values: Dict[str, str]) -> str:
    """The block's text with each placeholder replaced; a placeholder without a value is refused by name."""
    unknown = sorted({p for p in PLACEHOLDER.findall(block.text) if p not in values})
    if unknown:
        raise ValueError(f"{block.where}: {', '.join(unknown)} has no value in the docs test (it knows "
                         f"{', '.join(PLACEHOLDERS)}: tests/docs_blocks.py PLACEHOLDERS); write a real value, use one "
                         f"of those, or mark the block <!-- docs-test: not-run: REASON -->")
    return PLACEHOLDER.sub(lambda m: values[m.group()], block.text)


def with_dry_run(script: str, commands: Tuple[str, ...]) -> Tuple[str, bool]:
    """The mode rule: each bin/run-cluster command that would queue a job (a submission CLUSTER PROFILE ..., --rerun,
    --first-to-start CLUSTER:PROFILE ..., resume, scaling, doctor --node) gets --dry-run, unless it has it or asks for
    --help (doctor --node has no dry run: the block fails, and is marked); `commands` are the CLI's command names.
    Returns the script and whether anything was added."""
    inserts = []
    for found in RUN_CLUSTER.finditer(script):
        first, rest = found["first"], found["rest"].split(" #")[0]
        words = rest.split()
        if not first or first in ("-h", "--help") or {"-h", "--help", "--dry-run"} & {first, *words}:
            continue
        if first in QUEUING and (first != "doctor" or "--node" in words):
            inserts.append(found.end("first"))
        elif first in ("--rerun", "--first-to-start") or (first not in commands and not first.startswith("-")):
            inserts.append(found.start("gap"))
    for at in sorted(inserts, reverse=True):
        script = f"{script[:at]} --dry-run{script[at:]}"
    return script, bool(inserts)


def mode(block: Block, commands: Tuple[str, ...]) -> str:
    """real, dry-run or not-run: how the test runs the block (the placeholders do not change it)."""
    if block.mark is not None:
        return "not-run"
    return "dry-run" if with_dry_run(block.text, commands)[1] else "real"


def counts(blocks: List[Block], commands: Tuple[str, ...]) -> Dict[str, int]:
    tally = {m: 0 for m in MODES}
    for block in blocks:
        if block.info == "bash":
            tally[mode(block, commands)] += 1
    return tally
