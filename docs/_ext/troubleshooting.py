"""The troubleshooting page (docs/reference/troubleshooting.md), written at every build from the code's own tables:
what ended a run (cluster_train/host/runs/causes.py ENDED_BY), why a failed run failed (its CAUSES: what
`status` prints as its cause, with the fix), and every kind of input that is refused before anything is queued (the
bad-input corpus, tests/bad_inputs/*.yaml, which the tests hold to one line naming the value and the fix)."""
import re
from pathlib import Path
from typing import Dict, List

import yaml
from sphinx.errors import ExtensionError

from cluster_train.host import project
from cluster_train.host.runs import causes

DOCNAME = "reference/troubleshooting"
MARKDOWN = re.compile(r"([\\*_\[\]<>|#{}])")  # what Markdown would read as markup in the code's plain text
CODE = re.compile(r"(`[^`]+`)")
ISSUE = re.compile(r"\s*\(issues? \d+[^)]*\)")  # "(issue 26 items 2, 3)": the project's history, not the reader's
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
    """Each file of the bad-input corpus as a section: what it covers (its opening comment's first sentence), then each
    case: its name and, where it has one, its note."""
    if not sorted(corpus.glob("*.yaml")):
        raise ExtensionError(f"{corpus} holds no bad-input cases: the troubleshooting page has no refusals to list")
    lines = []
    for path in sorted(corpus.glob("*.yaml")):
        lines += [f"### {path.stem.replace('_', ' ').capitalize()}", "", text(covers(path)), ""]
        lines += [case_line(case) for case in yaml.safe_load(path.read_text())["cases"]] + [""]
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


def case_line(case: Dict) -> str:
    words = case["id"].replace("-", " ").replace("_", " ")
    note = f": {text(' '.join(ISSUE.sub('', case['note']).split()))}" if case.get("note") else ""
    return f"- {text(words)}{note}"


def markers() -> Dict[str, str]:
    """troubleshooting.md's placeholders, each with its generated list."""
    return {"<!-- generated: endings -->": endings(), "<!-- generated: failure causes -->": failure_causes(),
            "<!-- generated: refusals -->": refusals(project.ROOT / "tests" / "bad_inputs")}


def fill(app, docname: str, source: List[str]) -> None:
    if docname != DOCNAME:
        return
    for marker, generated in markers().items():
        if marker not in source[0]:
            raise ExtensionError(f"docs/{DOCNAME}.md lost its line {marker}: that generated list has no place")
        source[0] = source[0].replace(marker, generated)


def always_read(app, env, added, changed, removed) -> List[str]:
    """Read the page again at every build: the code's tables change, not the page."""
    return [DOCNAME] if DOCNAME in env.found_docs else []


def setup(app):
    app.connect("source-read", fill)
    app.connect("env-get-outdated", always_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
