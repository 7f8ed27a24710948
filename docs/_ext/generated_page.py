"""What the generated pages share: a page whose placeholder lines (`<!-- generated: ... -->`) are replaced, at every
build, by text the code makes; a page that lost a placeholder fails the build."""
from typing import Callable, Dict, List

from sphinx.errors import ExtensionError


def generate(app, docname: str, markers: Callable[[], Dict[str, str]]) -> Dict[str, bool]:
    """Fill `docname`'s placeholders with `markers()` (placeholder line -> its text) and read the page again at every
    build: the code changes, not the page."""

    def fill(app, read: str, source: List[str]) -> None:
        if read != docname:
            return
        for marker, generated in markers().items():
            if marker not in source[0]:
                raise ExtensionError(f"docs/{docname}.md lost its line {marker}: that generated text has no place")
            source[0] = source[0].replace(marker, generated)

    def always_read(app, env, added, changed, removed) -> List[str]:
        return [docname] if docname in env.found_docs else []

    app.connect("source-read", fill)
    app.connect("env-get-outdated", always_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
