"""README.md stays a two-screen front page: at most 150 lines, the two set-up commands first, every cluster file in
its one table, and every relative link it makes (into docs/, clusters/) names a file of the checkout, so a page that
is renamed or dropped fails here (the docs site's own links are checked by its strict build)."""
import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()
MAX_LINES = 150  # issue 42: the README fits on two screens; everything else lives in docs/


def relative_links(text: str) -> list:
    """Markdown link targets, inline and reference definitions, that are paths of the checkout (no scheme, no page
    anchor), without their #anchor."""
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"^\[[^\]]+\]: (\S+)$", text, re.M)
    return [t.split("#", 1)[0] for t in targets if "://" not in t and not t.startswith(("#", "mailto:"))]


def test_readme_is_at_most_150_lines():
    assert len(README.splitlines()) <= MAX_LINES, len(README.splitlines())


def test_readme_starts_with_the_demo_and_the_tests():
    blocks = re.findall(r"^```bash\n(.*?)^```$", README, re.M | re.S)
    assert [b.split()[:2] for b in blocks[:2]] == [["make", "demo"], ["make", "test"]], blocks[:2]


def test_readme_cluster_table_names_every_cluster_file():
    table = README.split("\n## Clusters\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([\w.-]+)`(?:, `([\w.-]+)`)?", table, re.M))
    names = {name for row in named for name in row if name}
    assert names == {path.stem for path in (ROOT / "clusters").glob("*.yaml")}


def test_readme_links_name_files_of_the_checkout():
    links = relative_links(README)
    assert len(links) >= 20, links  # the documentation's pages are linked, not repeated
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
