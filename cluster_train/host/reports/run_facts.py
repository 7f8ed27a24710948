"""The facts of a run directory that `run-cluster compare` (compare.py) and `run-cluster report` (report.py) both
read: its manifest and results.json (`Run`, `load_run`), its metrics, its config flattened to dotted keys and the keys
that differ between runs, its image digest and code version in short, and how a value is shown."""
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.runs import metrics
from cluster_train.host.runs.manifest import Manifest

# results.json keys that hold a metric (the rest are facts: hosts, paths, versions, speed)
METRIC_PREFIXES = ("initial_", "final_", "best_", "test_", "val_")


@dataclass
class Run:
    path: Path
    manifest: Manifest
    results: Dict[str, Any] = field(default_factory=dict)  # {} while running, or when training failed

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def config(self) -> Dict[str, Any]:
        return self.manifest.config

    def metrics(self) -> Dict[str, float]:
        """results.json's metrics, nested ones dotted (seed 000's test_acc.<Model>, seed 001's
        best_val_acc.expert_0); your own code's: every number it wrote there (the results contract)."""
        if self.manifest.is_own_code:
            return metrics.own_results(self.results)
        found = {}
        for key, value in flat(self.results).items():
            if key.startswith(METRIC_PREFIXES) and is_number(value):
                found[key] = float(value)
        if is_number(self.results.get("epochs")):
            found["epochs"] = float(self.results["epochs"])
        return found


def load_run(path: Path) -> Run:
    """A run directory's manifest (checked as status checks it) and results; one error line naming the fix."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory; pass a run directory made by run-cluster (runs/<id>)")
    manifest = runs.read_manifest(path)
    return Run(path, manifest, read_results(path))


def read_results(path: Path) -> Dict[str, Any]:
    try:
        results = json.loads((path / "results.json").read_text())
    except (OSError, ValueError):  # not written yet (running), or the job died before writing it
        return {}
    return results if isinstance(results, dict) else {}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def flat(tree: Any, prefix: str = "") -> Dict[str, Any]:
    """A nested dict as dotted keys -> leaf values (lists stay leaves)."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    out: Dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flat(value, name))
        else:
            out[name] = value
    return out


def differing(configs: Sequence[Dict[str, Any]]) -> List[str]:
    """The dotted config keys whose values are not the same in every config (a key one of them lacks counts)."""
    flats = [flat(c) for c in configs]
    keys = sorted({k for f in flats for k in f})
    missing = object()
    # output_dir is each run's own directory: it always differs and says nothing about the training
    return [k for k in keys if k != "output_dir"
            and len({json.dumps(f.get(k, missing), sort_keys=True, default=str) for f in flats}) > 1]


def short_digest(manifest: Manifest) -> str:
    digest = manifest.image.get("sha256") or ""
    return f"{manifest.image_flavor or '?'} {digest[:12]}" if digest else "-"


def code_version(manifest: Manifest) -> str:
    """The git commit it was submitted from (+dirty: uncommitted changes) and the code snapshot's digest if any; for
    your own code, your project's commit, not cluster-train's."""
    commit, dirty = git_of(manifest)
    text = (commit[:10] or "no git") + ("+dirty" if dirty else "")
    code = manifest.code
    if code and code.get("sha256"):
        text += f" code {code['sha256'][:12]}"
    return text


def users_code(manifest: Manifest) -> Dict[str, Any]:
    """The snapshot record of your own project's code (its source, git commit and dirty flag); {} for a run of the
    image's tasks, or of this checkout's (--dev: its commit is cluster-train's own)."""
    code = manifest.code
    return code if code and not code.get("dev") and manifest.is_own_code else {}


def git_of(manifest: Manifest) -> Tuple[str, bool]:
    """(commit, dirty) of the code that ran: your project's for your own code, else cluster-train's checkout."""
    own = users_code(manifest)
    if own:
        return own.get("git_commit") or "", bool(own.get("git_dirty"))
    return manifest.git.get("commit") or "", bool(manifest.git.get("dirty"))


def lower_is_better(metric: str) -> bool:
    return any(word in metric.lower() for word in ("loss", "err", "perplexity", "wait"))


def show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)
