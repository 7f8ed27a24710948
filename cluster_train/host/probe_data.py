"""`run-cluster probe-data EXPERIMENT [--set KEY=VALUE ...] [--batches N] [--cluster C]`: the host memory of an
experiment's data loading, measured on this machine before its first submission, so that preflight budgets a
measured figure per dataloader worker instead of the stated data.worker_mem_gb (cluster_train/host/jobs/measured.py).

A few batches go through the experiment's own data module, with its num_workers and batch_size, inside the current
CPU image (torch is only there: `python -m train probe_data`, cluster_train/image/probe.py), the data bound read-only.
No model is built: the workers' memory is the data's. The figures go to <runs root>/probes/<experiment>.json, keyed by
the data (data.name and the data image's digest, else data.root), in the runs root of the cluster whose preflight reads
them (--cluster, default local: $CT_RUNS_DIR or runs/). Run it where the data is: on a cluster, its login node."""
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError, raise_all
from cluster_train.host import apptainer
from cluster_train.host.clusters.flavors import make_image
from cluster_train.host.data import store as data_store
from cluster_train.host.images import store
from cluster_train.host.jobs import config_check, measured
from cluster_train.host.jobs.build import Site, experiment_config, stale_image
from cluster_train.host.jobs.overrides import user_overrides
from cluster_train.host.jobs.resolve import absolute_inputs
from cluster_train.host.usage import Parser

FLAVOR = "cpu"


def main(argv: List[str]) -> int:
    p = Parser(prog="run-cluster probe-data", description=__doc__.split("\n\n")[0])
    p.add_argument("experiment", help="a name in experiments/ or a YAML path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set data.num_workers=8 (repeatable)")
    p.add_argument("--batches", type=int, default=20, help="batches to load (default 20)")
    p.add_argument("--cluster", default="local", help="whose preflight reads the figures (default local)")
    args = p.parse_args(argv)
    if args.batches < 1:
        raise UserError(f"--batches {args.batches}: load at least one batch, e.g. --batches 20")
    site = Site.load(args.cluster)
    run = probe_config(site, args.experiment, args.overrides)
    image = store.current(FLAVOR, site.image_store)
    if image is None:
        raise UserError(f"no {FLAVOR} image has been built here; build it with: {make_image(FLAVOR)}")
    for line in stale_image(image, allowed=True):
        print(f"run-cluster: {line}", file=sys.stderr)
    digest, bind = data_image(run, site)
    record = in_image(run, image, args.batches, bind)
    if not record["workers_seen"]:
        raise UserError(f"no dataloader worker of {run.name} was seen in {record['batches']} batch(es); load more "
                        f"(--batches), or the image's torch is older than 2.1 (it does not name its workers)")
    path = save(site.runs_root, run, digest, {**record, "image_sha256": image.sha256})
    print(f"probe-data {run.name}: {record['num_workers']} workers x batch {record['batch_size']}, "
          f"{record['batches']} batches: {measured.gb(record['worker_peak_gb'])} GB per worker, "
          f"{measured.gb(record['loader_peak_gb'])} GB the loading process (PSS peaks); preflight on "
          f"{site.cluster.name} now budgets {measured.gb(record['worker_peak_gb'] * measured.MARGIN)} GB per worker "
          f"for {run.name} on this data ({path})")
    return 0


def probe_config(site: Site, experiment: str, overrides: List[str]) -> cfg.RunConfig:
    """The experiment's run config with your --set, checked as a submission checks it (names, paths)."""
    config_file = experiment_config(experiment)
    run = absolute_inputs(cfg.resolve(site.experiment(config_file), user_overrides(overrides, site.cluster.path)))
    if run.command:
        raise UserError(f"{experiment} runs your own command, whose data loading cluster-train does not know; "
                        f"probe-data measures a data set of ours (bin/run-cluster names)")
    if run.data.num_workers == 0:
        raise UserError(f"data.num_workers is 0 in {experiment}: there are no dataloader workers to measure; "
                        f"--set data.num_workers=N as the job will run")
    raise_all(config_check.problems(run))
    if not run.data.image:
        refuse_empty_root(run)
    return run


def refuse_empty_root(run: cfg.RunConfig) -> None:
    """An empty data.root, said here at once, by the data set's name: the image would take seconds to start before
    its data module found nothing there."""
    root = Path(run.data.root)
    if root.is_dir() and not any(root.iterdir()):
        raise UserError(f"data.root {root} is empty: probe-data loads the data a job will read; put the "
                        f"{run.data.name} data set there (a small generated one: python -m train make_data "
                        f"{run.data.name} {root}, run in the CPU image)")


def data_image(run: cfg.RunConfig, site: Site) -> Tuple[str, Optional[str]]:
    """A packed data set's digest and its bind at data.root (read-only, as jobs bind it); ("", None) without one."""
    if not run.data.image:
        return "", None
    entry = data_store.verified(run.data.image, data_store.data_root(site.image_store))
    return entry.sha256, f"{entry.path}:{run.data.root}:ro,image-src=/"


def in_image(run: cfg.RunConfig, image: store.ImageRecord, batches: int, data_bind: Optional[str]) -> dict:
    """`python -m train probe_data` in the image, from a directory
    of its own (so the image's cluster_train package runs)."""
    with tempfile.TemporaryDirectory(prefix="ct-probe-") as tmp:
        cfg.dump(run, Path(tmp) / "config.yaml")
        binds = [tmp, *(f"{path}:{path}:ro" for path in cfg.input_paths(run).values()), *filter(None, [data_bind])]
        # --no-mount cwd: apptainer's bind of the directory it is started in would hide a data image mounted below it
        options = ["--cleanenv", "--no-home", "--no-mount", "cwd", "--pwd", tmp,
                   *(arg for bind in binds for arg in ("-B", bind))]
        done = apptainer.exec_(options, image.path, ["python", "-m", "train", "probe_data", "--config",
                                                     f"{tmp}/config.yaml", f"--batches={batches}", "--out",
                                                     f"{tmp}/probe.json"])
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise UserError(f"probe-data of {run.name} failed in the image (exit {done.returncode}): {said}")
        return json.loads((Path(tmp) / "probe.json").read_text())


def save(runs_root: Path, run: cfg.RunConfig, digest: str, record: dict) -> Path:
    """Into the experiment's probe file, under this data's identity (other data's entries stay)."""
    path = measured.probe_file(runs_root, run.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):  # the first probe of this experiment, or a damaged file: written anew
        entries = {}
    entries = entries if isinstance(entries, dict) else {}
    identity = measured.data_identity(run.data.name, digest, run.data.root)
    entries[identity] = {"experiment": run.name, **record, "measured_at": time.time()}
    store.atomic_write(path, json.dumps(entries, indent=2) + "\n")
    return path
