"""Messages and comments that send a user to the documentation name a page (and a heading) that exists: a page moved
or a heading renamed fails here, not in front of a user who followed the pointer."""
import re

from conftest import ROOT

CITED_FROM = ("cluster_train/host", "bin", "containers", "examples", "Makefile")
CITATION = re.compile(r"docs/([\w/-]+\.md)(?:#([\w-]+))?")


def heading_anchors(page: str) -> set:
    """The anchors MyST gives a page's headings (myst_heading_anchors): lower case, punctuation dropped, '-' for ' '."""
    headings = re.findall(r"^#{1,6} (.+)$", page, re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def citations() -> list:
    found = []
    for place in CITED_FROM:
        path = ROOT / place
        for source in ([path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())):
            if source.suffix in {".pyc", ".sif"}:
                continue
            text = source.read_text(errors="replace")
            found += [(source.relative_to(ROOT), page, anchor) for page, anchor in CITATION.findall(text)]
    return found


def test_the_anchors_are_myst_s():
    assert heading_anchors("# Add a scheduler\n## Your site's own scheduler\n") == {
        "add-a-scheduler", "your-sites-own-scheduler"}


def test_every_page_and_heading_the_code_cites_exists():
    cited = citations()
    assert len(cited) >= 4, cited  # the doctor, scheduler, init-cluster messages and the example's docstring
    missing = []
    for source, page, anchor in cited:
        target = ROOT / "docs" / page
        if not target.is_file() or (anchor and anchor not in heading_anchors(target.read_text())):
            missing.append(f"{source}: docs/{page}{'#' + anchor if anchor else ''}")
    assert not missing, missing
