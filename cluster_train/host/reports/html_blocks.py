"""The HTML building blocks of report.html (report.py): escaping, tables, sections, the figures (PNG, or SVG where
matplotlib is missing) as data: URIs with the JSON block recording how many points each curve drew, and the page
around them with its style sheet. No script: the page is static and opens from a mail attachment or a copy off the
cluster."""
import base64
import html
import json
from typing import Dict, List, Sequence, Tuple

from cluster_train.host.reports import curves
from cluster_train.host.reports.run_facts import show

STYLE = """body{font-family:sans-serif;margin:1.5em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left;
font-size:.9em;vertical-align:top}th{background:#eef}pre{background:#f6f6f6;padding:.8em;font-size:.85em;overflow:auto}
img{margin:.4em .4em 1em 0;max-width:100%;vertical-align:top}
.curves img{max-width:49%}.note{color:#666;font-size:.9em}"""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # matplotlib's figures; svg_curves.py's begin "<svg"


def esc(value) -> str:
    return html.escape(value if isinstance(value, str) else show(value))


def table(header: Sequence[str], rows: Sequence[Sequence], css_class: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def facts_table(rows: Sequence[Tuple[str, object]]) -> str:
    """Name-value pairs, the name as the row's heading."""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts"><tbody>{body}</tbody></table>'


def section(title: str, body: str) -> str:
    return f"<section><h2>{esc(title)}</h2>{body}</section>"


class Images:
    """The page's figures as data: URIs, and how many points each curve in them drew (checked by the tests)."""

    def __init__(self):
        self.points: List[Dict] = []
        self.count = 0

    def img(self, data: bytes, alt: str, drawn: Sequence[Tuple[str, curves.Series]]) -> str:
        self.count += 1
        for run, s in drawn:
            self.points.append({"image": self.count, "run": run, "source": s.source, "column": s.column,
                                "points": s.points})
        kind = "image/png" if data.startswith(PNG_SIGNATURE) else "image/svg+xml"
        uri = f"data:{kind};base64," + base64.b64encode(data).decode("ascii")
        return f'<img id="curve-{self.count}" alt="{esc(alt)}" src="{uri}">'

    def json_block(self) -> str:
        text = json.dumps(self.points, indent=1).replace("</", "<\\/")  # no "</script>" inside the block
        return f'<script type="application/json" id="curve-points">{text}</script>'


def page(title: str, body: str, images: Images) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{STYLE}</style></head><body><h1>{esc(title)}</h1>{body}{images.json_block()}</body></html>\n")
