"""The troubleshooting page (docs/reference/troubleshooting.md), written at every build from the code's own tables:
what ended a run (cluster_train/host/runs/causes.py ENDED_BY), why a failed run failed (its CAUSES: what
`status` prints as its cause, with the fix), and every kind of input that is refused before anything is queued (the
bad-input corpus, tests/bad_inputs/*.yaml, which the tests hold to one line naming the value and the fix)."""
import re
from pathlib import Path
from typing import Dict

import yaml
from sphinx.errors import ExtensionError

from generated_page import generate

from cluster_train.host import project
from cluster_train.host.runs import causes

DOCNAME = "reference/troubleshooting"
MARKDOWN = re.compile(r"([\\*_\[\]<>|#{}])")  # what Markdown would read as markup in the code's plain text
CODE = re.compile(r"(`[^`]+`)")
ISSUE = re.compile(r"\s*\(issues? \d+[^)]*\)")  # "(issue 26 items 2, 3)": the project's history, not the reader's
REFUSALS = Path(__file__).resolve().parents[1] / "reference" / "refusals.yaml"
PLACEHOLDER = re.compile(r"\{\w+\}")  # a message's place for what the log or the scheduler said


def text(plain: str) -> str:
    """Plain text as Markdown: `code` spans kept, markup characters outside them escaped."""
    return "".join(part if i % 2 else MARKDOWN.sub(r"\\\1", part) for i, part in enumerate(CODE.split(plain)))


def code(pattern: str) -> str:
    return f"`` {pattern} ``" if "`" in pattern else f"`{pattern}`"


def endings() -> str:
    """One item per entry of causes.ENDED_BY: the words `status` prints, what to do."""
    return "\n".join(f"- **{text(PLACEHOLDER.sub('…', said))}**: {text(fix)}"
                     for said, fix in causes.ENDED_BY.values())


def failure_causes() -> str:
    """One item per entry of causes.CAUSES, in its order (the first that matches is the one `status` prints)."""
    lines = []
    for pattern, message in causes.CAUSES:
        said = ("the log's own error line, which names the place and the fix" if PLACEHOLDER.fullmatch(message)
                else text(PLACEHOLDER.sub("…", message)))
        lines.append(f"- {code(pattern)} in a job's log: {said}")
    return "\n".join(lines)


def refusals(corpus: Path) -> str:
    """Each file of the bad-input corpus as a section: what it covers (its opening comment's first sentence), then
    each case's one line as the command line says it (refusals.yaml, which tests/host/test_bad_inputs.py keeps
    current): the value it names and the fix."""
    said = yaml.safe_load(REFUSALS.read_text()) if REFUSALS.is_file() else {}
    if not sorted(corpus.glob("*.yaml")) or not said:
        raise ExtensionError(f"{corpus} or {REFUSALS} holds no bad-input cases: the page has no refusals to list")
    lines = []
    for path in sorted(corpus.glob("*.yaml")):
        ids = [case["id"] for case in yaml.safe_load(path.read_text())["cases"]]
        missing = [cid for cid in ids if cid not in said]
        if missing:
            raise ExtensionError(f"{REFUSALS.name} lacks {missing}: run make golden")
        lines += [f"### {path.stem.replace('_', ' ').capitalize()}", "", text(covers(path)), ""]
        lines += [f"- {text(line)}" for line in dict.fromkeys(said[cid] for cid in ids)] + [""]
    return "\n".join(lines)


def covers(path: Path) -> str:
    """The first sentence of the file's opening comment (what the cases have in common)."""
    comment = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or line.startswith("#  "):  # the end of the comment, or its example file
            break
        comment.append(line.lstrip("# "))
    first = re.split(r"(?<=[.:])\s", ISSUE.sub("", " ".join(comment)), maxsplit=1)[0]
    return first.rstrip(":.") + "."


def markers() -> Dict[str, str]:
    """troubleshooting.md's placeholders, each with its generated list."""
    return {"<!-- generated: endings -->": endings(), "<!-- generated: failure causes -->": failure_causes(),
            "<!-- generated: refusals -->": refusals(project.ROOT / "tests" / "bad_inputs")}


def setup(app):
    return generate(app, DOCNAME, markers)
