"""Host memory measured, not guessed: the figures preflight budgets per rank and per dataloader worker. Earlier runs
of the same experiment on the same data recorded their peaks (results.json `host_memory`, cluster_train/image/pss.py),
and so did `run-cluster probe-data` (<runs root>/probes/<experiment>.json); the newest of each, plus MARGIN, replaces
the stated data.rank_mem_gb and data.worker_mem_gb. A value you --set wins over any measurement (the messages say what
it replaced). A probe loads no model, so it measures the workers only: the rank's own figure comes from runs, and from
runs on the same cluster only (a rank's host memory depends on its node: a CUDA context takes gigabytes a CPU rank does
not), while a worker's, the data's, holds wherever it was measured.

The same data: the same data.name, and the same data image digest (data.image) or, without one, the same data.root.
The runs root is read once per command: a sweep's thousand elements share one Site (cluster_train/host/jobs/build.py).
Torch-free."""
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

from cluster_train.shared import config as cfg
from cluster_train.host import project
from cluster_train.host.clusters import Profile
from cluster_train.host.data import store as data_store

# A peak is one run's: a longer run, another epoch's batches or a busier node take more; a quarter more keeps the
# next job off the edge that seed 003's job fell over (its OOM kills came with every worker at its peak).
MARGIN = 1.25
PROBES = "probes"  # under a runs root: probe-data's figures, one file per experiment
FIGURES = {"rank": "data.rank_mem_gb", "worker": "data.worker_mem_gb"}


@dataclass(frozen=True)
class Measure:
    gb: float  # the peak PSS measured
    where: str  # "run <id>", or the probe file
    at: float  # when, in seconds since the epoch: the newest wins


@dataclass(frozen=True)
class Figure:
    gb: float  # what preflight budgets
    said: str  # the figure and where it came from, as messages print it


@dataclass(frozen=True)
class HostRam:
    rank: Figure
    worker: Figure


Key = Tuple[str, str]  # (experiment name, data identity)
Index = Dict[Key, Dict[str, Measure]]  # -> {"rank <cluster>": newest there, "worker": newest}


def data_identity(data_name: str, digest: str, root: str) -> str:
    return f"{data_name} sha256:{digest}" if digest else f"{data_name} {root}"


def index(runs_root: Path) -> Index:
    """Every measurement under a runs root: its runs (sweep elements too) and its probes, the newest of each kind."""
    found: Index = {}
    for results in [*runs_root.glob("*/results.json"), *runs_root.glob("*/e*/results.json")]:
        for key, kind, measure in from_run(results.parent):
            _keep(found, key, kind, measure)
    for probe in (runs_root / PROBES).glob("*.json"):
        for key, kind, measure in from_probe(probe):
            _keep(found, key, kind, measure)
    return found


def _keep(found: Index, key: Key, kind: str, measure: Measure) -> None:
    newest = found.setdefault(key, {})
    if kind not in newest or measure.at > newest[kind].at:
        newest[kind] = measure


def from_run(run_dir: Path) -> Iterator[Tuple[Key, str, Measure]]:
    """A finished run's peaks; nothing from one that failed, is damaged or predates the measurement."""
    try:
        memory = json.loads((run_dir / "results.json").read_text())["host_memory"]
        # the JSON itself, not runs/manifest.py's Manifest: jobs sits below runs; any damage here only skips the run
        manifest = json.loads((run_dir / "manifest.json").read_text())
        data = manifest["config"]["data"]
        key = (manifest["config"]["name"], data_identity(data["name"], (manifest.get("data") or {}).get("sha256") or "",
                                                         data["root"]))
        at, where = (run_dir / "results.json").stat().st_mtime, f"run {manifest['run_id']}"
        yield key, f"rank {manifest['cluster']}", Measure(float(memory["rank_peak_gb"]), where, at)
        if memory.get("worker_peak_gb"):  # None: no workers, or none measured (torch < 2.1)
            yield key, "worker", Measure(float(memory["worker_peak_gb"]), where, at)
    except (OSError, ValueError, KeyError, TypeError):
        return


def from_probe(path: Path) -> Iterator[Tuple[Key, str, Measure]]:
    try:
        entries = json.loads(path.read_text())
        for identity, entry in entries.items():
            if entry.get("worker_peak_gb"):
                measure = Measure(float(entry["worker_peak_gb"]), f"probe-data {path}", float(entry["measured_at"]))
                yield (entry["experiment"], identity), "worker", measure
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return


def probe_file(runs_root: Path, experiment: str) -> Path:
    return Path(runs_root) / PROBES / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', experiment)}.json"


def host_ram(site, profile: Profile, run: cfg.RunConfig, user_set: Dict[str, Any],
             config_file: Optional[Path]) -> HostRam:
    """The figures preflight budgets for this job: your --set, else the newest measured (+MARGIN), else as stated.
    What it reads is kept in the Site's cache, once per command."""
    cache = site.host_memory
    if "index" not in cache:
        cache["index"] = index(site.runs_root)
    found = cache["index"].get((run.name, run_identity(site, run)), {})
    measured = {"rank": found.get(f"rank {site.cluster.name}"), "worker": found.get("worker")}
    figures = {}
    for kind, key in FIGURES.items():
        where = ("stated in", key, profile.name, config_file)
        if where not in cache:
            cache[where] = stated_in(key, profile, site.cluster.path, config_file, site)
        stated = getattr(run.data, key.split(".")[1])
        figures[kind] = figure(kind, key, stated, measured[kind], key in user_set, cache[where])
    return HostRam(**figures)


def run_identity(site, run: cfg.RunConfig) -> str:
    """The data a new run reads; a data image by its digest (a name in the data store names one digest for good),
    "" for one the store does not hold (the job is refused for it: nothing measured applies)."""
    if not run.data.image:
        return data_identity(run.data.name, "", run.data.root)
    key = ("data image", run.data.image)
    if key not in site.host_memory:
        entry = data_store.find(run.data.image, data_store.data_root(site.image_store))
        site.host_memory[key] = data_identity(run.data.name, entry.sha256, "") if entry else ""
    return site.host_memory[key]


def figure(kind: str, key: str, stated: float, measure: Optional[Measure], user_set: bool, where: str) -> Figure:
    if user_set:
        over = f"; {gb(measure.gb)} GB measured in {measure.where}" if measure else ""
        return Figure(stated, f"{gb(stated)} GB per {kind} as you set it (--set {key}{over})")
    if measure:
        budget = measure.gb * MARGIN
        return Figure(budget, f"{gb(budget)} GB per {kind} measured in {measure.where} ({gb(measure.gb)} GB "
                              f"+{round((MARGIN - 1) * 100)} %)")
    return Figure(stated, f"{gb(stated)} GB per {kind} as stated ({key} in {where})")


def stated_in(key: str, profile: Profile, cluster_file: str, config_file: Optional[Path], site) -> str:
    """Which file states the value a run config holds (the profile's data: over the experiment's)."""
    name = key.split(".")[1]
    if name in profile.data:
        return f"profile {profile.name} of {shown(cluster_file)}"
    if config_file and name in (site.experiment(config_file).get("data") or {}):
        return shown(config_file)
    return "cluster_train/shared/config.py, the default"


def shown(path) -> str:
    """A path inside the checkout as users type it (experiments/x.yaml), any other as it is."""
    path = Path(path).resolve()
    return str(path.relative_to(project.ROOT)) if project.ROOT in path.parents else str(path)


def gb(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")
