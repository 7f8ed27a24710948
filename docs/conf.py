"""Sphinx configuration of the cluster-train documentation site: `make docs` builds it into build/docs, strictly
(sphinx-build -W -n --keep-going: a broken link, a missing reference or a page in no toctree fails the build)."""
# Why Sphinx (with MyST-Parser for Markdown pages and the furo theme) and not MkDocs: MkDocs core (1.6.1, Aug 2024) is
# unmaintained and Material is in maintenance mode; Sphinx is what SkyPilot, TorchX and Lightning use, its autodoc reads
# the Python API's docstrings, and -W -n is a strict mode that fails on any broken reference.
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]  # the project (autodoc, the generated pages) and our extensions

project = "cluster-train"
author = "cluster-train"
copyright = "cluster-train"  # noqa: A001 (Sphinx's name)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "plain_docstrings",  # docs/_ext: the API's docstrings are plain text with `code`, not reStructuredText
    "cli_reference",  # docs/_ext: the command-line reference, read from bin/run-cluster's own parsers
    "troubleshooting",  # docs/_ext: refusals and failure causes, read from the code's tables and tests/bad_inputs
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # [x](../how-to/sweeps.md#a-heading) links work
myst_enable_extensions = ["colon_fence", "deflist"]
smartquotes = False  # --dry-run stays two hyphens (not an en dash) and quotes stay what a shell takes

html_theme = "furo"
html_title = "cluster-train"
html_show_sourcelink = False

autodoc_member_order = "bysource"
autodoc_typehints = "description"  # types under each parameter, not in a long signature line
autodoc_class_signature = "separated"
# Standard-library and typing names in signatures: Python's own docs are not linked (the build needs no network)
nitpick_ignore_regex = [("py:class", r"(typing|pathlib|collections\.abc|concurrent\.futures|enum|datetime)\..*"),
                        ("py:class", r"(Path|Any|Optional|Union|Callable|Iterator|Iterable|Sequence|Mapping)"),
                        ("py:class", r"(dict|list|tuple|str|int|float|bool|None|NoneType|object|type)"),
                        # the API's internal types in its signatures (UserError, Site, Segment): not public, no page
                        ("py:class", r"cluster_train\.(host|shared)\..*")]
