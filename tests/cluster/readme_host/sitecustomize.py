"""Put on PYTHONPATH, this makes python3 a host with only what the README asks for: the standard library, pyyaml and
jinja2 (with markupsafe, jinja2's own dependency), and this checkout. Any other top-level import fails as a missing
package would, and its name is appended to $CT_REFUSED_IMPORTS, so a test can show what was refused (matplotlib,
from the report)."""
import os
import sys

ALLOWED = {"yaml", "_yaml", "jinja2", "markupsafe", "cluster_train", "train", "sitecustomize", "usercustomize"}


class ReadmeHostOnly:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if path is not None or top in sys.stdlib_module_names or top in ALLOWED or top.startswith("_"):
            return None  # a submodule, the standard library or an allowed package: found as usual
        log = os.environ.get("CT_REFUSED_IMPORTS")
        if log:
            with open(log, "a") as f:
                f.write(name + "\n")
        raise ModuleNotFoundError(f"No module named {name!r} (not a host package the README asks for)", name=name)


sys.meta_path.insert(0, ReadmeHostOnly())
