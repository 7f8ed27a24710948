"""The documentation site (docs/, `make docs`): it builds in strict mode; a broken link fails the build; the built site
opens in headless Chromium over HTTP with nothing on the console and every file it asks for served, and its search
finds "requeue"; the generated references hold every command `run-cluster --help` lists and every public API name."""
import functools
import http.server
import importlib.util
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from cluster_train.host import api, commands

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # a whole site's build (~10 s on two busy cores) and Chromium: make test, not test-fast


def make_docs(source: Path, out: Path) -> subprocess.CompletedProcess:
    """`make docs` of `source` into `out`, in the venv this test runs in (make test made it: -o venv)."""
    if importlib.util.find_spec("sphinx") is None:
        pytest.fail("the test venv has no Sphinx: make venv (tests/requirements.txt includes docs/requirements.txt)")
    return subprocess.run(["make", "--no-print-directory", "-o", "venv", "docs", f"DOCS_SRC={source}",
                           f"DOCS_OUT={out}"], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = make_docs(ROOT / "docs", out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_make_docs_builds_the_site_strictly(site):
    for page in ("index", "reference/cli", "reference/api", "reference/troubleshooting", "search"):
        assert (site / f"{page}.html").is_file(), page
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^docs: venv\n\t\$\(PY\) -m sphinx -W -n --keep-going ", makefile, re.MULTILINE)


def test_a_broken_link_or_anchor_or_an_orphan_page_fails_the_build(tmp_path):
    """A tiny copy of docs/ (its conf.py and extensions, two pages) with a link to a missing page, a link to a missing
    heading and a page in no toctree: the build fails, on these three and nothing else."""
    copy = tmp_path / "docs"
    copy.mkdir()
    shutil.copy(ROOT / "docs" / "conf.py", copy)
    shutil.copytree(ROOT / "docs" / "_ext", copy / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    index = "# Home\n\n[a page](page.md#a-heading)\n\n```{toctree}\npage\n```\n"
    (copy / "index.md").write_text(index + "\n[gone](missing.md) and [no such](page.md#no-such-heading)\n")
    (copy / "page.md").write_text("# Page\n\n## A heading\n")
    (copy / "orphan.md").write_text("# Orphan\n")
    broken = make_docs(copy, tmp_path / "out")
    warnings = [line for line in broken.stderr.splitlines() if "WARNING" in line]
    assert broken.returncode != 0 and len(warnings) == 3, broken.stderr
    for said in ("missing.md", "no-such-heading", "orphan"):
        assert any(said in line for line in warnings), broken.stderr


class Server(http.server.ThreadingHTTPServer):
    """The built site over HTTP on a free port, each request's path and status kept (a file the browser asked for
    and did not get shows here; Chromium's log does not say)."""

    def __init__(self, root: Path):
        self.served = []
        handler = functools.partial(Quiet, directory=str(root))
        super().__init__(("127.0.0.1", 0), handler)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_request(self, code="-", size="-"):
        self.server.served.append((self.path, int(code)))

    def log_message(self, *args):
        pass


def browse(url: str, tmp_path: Path):
    """The page's DOM after its scripts ran (10 s of virtual time), and what it logged on the console."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: run `make chromium` (make test does)")
    done = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'c'}",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-3000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def test_the_site_opens_in_chromium_without_console_errors_and_its_search_finds_requeue(site, tmp_path):
    server = Server(site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for page in ("index.html", "reference/api.html"):
            dom, console = browse(f"{base}/{page}", tmp_path)
            assert not console and "cluster-train" in dom, console
        dom, console = browse(f"{base}/search.html?q=requeue", tmp_path)
    finally:
        server.shutdown()
    assert not console, console
    found = re.search(r'<ul[^>]*class="search"[^>]*>(.*?)</ul>', dom, re.DOTALL)
    assert found and 'href="reference/troubleshooting.html' in found.group(1), dom[-3000:]
    # /favicon.ico: Chromium asks every site for one; no page names it
    failed = [(path, code) for path, code in server.served if code >= 400 and path != "/favicon.ico"]
    assert not failed and len(server.served) > 10, server.served  # the pages, their styles, scripts and index


def test_the_cli_reference_holds_every_command_run_cluster_help_lists(site):
    listed = subprocess.run([str(ROOT / "bin" / "run-cluster"), "--help"], capture_output=True, text=True, timeout=60)
    names = re.findall(r"^    ([a-z][a-z-]+)  ", listed.stdout.split("commands (")[1], re.MULTILINE)
    assert len(names) == len(commands.COMMANDS), listed.stdout  # the listing parsed as meant
    page = (site / "reference" / "cli.html").read_text()
    missing = [name for name in names if f'id="run-cluster-{name}"' not in page]
    assert not missing, f"not in docs/reference/cli.md: {missing}"
    options = re.findall(r"^  (--[a-z-]+)", listed.stdout, re.MULTILINE)
    assert options and all(option in page for option in options), options


def test_the_api_reference_documents_every_public_name(site):
    page = (site / "reference" / "api.html").read_text()
    missing = [name for name in api.__all__ if f'id="cluster_train.{name}"' not in page]
    assert not missing, f"add them to docs/reference/api.md: {missing}"
