"""The API's docstrings are plain text, as `help()` shows them, with `code` in single backticks (as in Markdown), not
reStructuredText: for autodoc, a backticked span becomes a literal (code, not RST's italic "interpreted text") and a
star outside one is a star (`fn(*args)`, "2 * 4"), not the start of emphasis."""
import re
from typing import List

SPAN = re.compile(r"(`[^`]+`)")


def as_rst(text: str) -> str:
    parts = SPAN.split(text)  # odd parts are the backticked spans
    return "".join(f"`{part}`" if i % 2 else part.replace("*", r"\*") for i, part in enumerate(parts))


def convert(app, what: str, name: str, obj, options, lines: List[str]) -> None:
    lines[:] = as_rst("\n".join(lines)).split("\n")


def setup(app):
    app.connect("autodoc-process-docstring", convert)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
