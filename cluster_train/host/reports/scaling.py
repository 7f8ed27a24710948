"""`run-cluster scaling CLUSTER PROFILE... [EXPERIMENT]`: scaling efficiency measured the way seed 004 describes it.

One short, fixed-step throughput job per profile, one after another (jobs side by side would share nodes and distort
each other's figures), the single-GPU baseline first; then throughput_N / (N x throughput_1) per profile, written as
scaling.json and scaling.png (efficiency per GPU count against the ideal line) in scaling/<id>/ beside runs/, with
every profile under seed 004's targets flagged: >= 95 % on one node (NVLink), >= 85 % across nodes (InfiniBand).
"""
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.jobs.build import Request, Site, build
from cluster_train.host.reports.curves import pyplot_figure
from cluster_train.host.runs.follow import drain, watch
from cluster_train.host.runs.queue import queue, submitted
from cluster_train.host.schedulers import State, adapter
from cluster_train.host.usage import Parser

TARGETS = {"one node": 0.95, "across nodes": 0.85}  # seed 004's
DEFAULT_EXPERIMENT = "navsim_planner"  # seed 003's 83 M-parameter planner at its real size: what GPU figures use


def parser() -> Parser:
    p = Parser(prog="run-cluster scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("cluster")
    p.add_argument("names", nargs="+", metavar="PROFILE... [EXPERIMENT]",
                   help=f"profiles, the 1-GPU baseline among them; then an experiment (default {DEFAULT_EXPERIMENT})")
    p.add_argument("--steps", type=int, default=50, help="training steps per rank in the measured epoch")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--timeout", type=float, default=6 * 3600, help="seconds to wait for each job")
    p.add_argument("--dry-run", action="store_true", help="check every job; submit nothing")
    return p


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)
    if args.steps < 1:
        raise UserError(f"--steps {args.steps}: measure at least 1 step")
    site = Site.load(args.cluster)
    cluster = site.cluster
    *profiles, last = args.names
    experiment = DEFAULT_EXPERIMENT if last in cluster.profiles else last  # the last name, if not a profile
    if last in cluster.profiles:
        profiles.append(last)
    subs = submissions(site, ordered(cluster, profiles), experiment, args)
    pyplot_figure()  # matplotlib, checked before any job: the figure comes after hours of them
    if args.dry_run:
        print("\n".join(f"{s.job.profile}: {s.job.total_ranks} rank(s), checked" for s in subs))
        return 0
    out = site.runs_root.parent / "scaling" / f"{time.strftime('%Y%m%d-%H%M%S')}-{cluster.name}"
    rows = [measure(sub, args.timeout) for sub in subs]
    table = efficiency(rows)
    write(out, cluster.name, experiment, table)
    print(render(table, out))
    return 0


def ordered(cluster, names: List[str]) -> list:
    """The profiles by rank count, refusing a set without a 1-rank baseline."""
    if not names:
        raise UserError("name the profiles to compare, the 1-GPU baseline among them, e.g. n1_gpu1 n1_gpu2 n2_gpu2")
    # unknown: refused
    found = sorted((cluster.profile(n) for n in dict.fromkeys(names)), key=lambda p: p.nodes * p.ranks)
    if found[0].nodes * found[0].ranks != 1:
        raise UserError(f"scaling is measured against one GPU, and the smallest of {', '.join(names)} starts "
                        f"{found[0].nodes * found[0].ranks} ranks; add a 1-GPU profile of {cluster.name}")
    return found


def submissions(site: Site, profiles, experiment: str, args) -> list:
    """Every job, checked before any is queued (a bad one refuses them all)."""
    fixed = [f"trainer.limit_train_batches={args.steps}", "trainer.max_epochs=2", "trainer.limit_val_batches=1",
             "trainer.export_weights=false"]  # epoch 1 warms up (workers, cuDNN, caches); epoch 2 is measured
    subs = [build(site, Request(p.name, experiment, [*args.overrides, *fixed], dry_run=args.dry_run)) for p in profiles]
    if subs[0].run.command:
        raise UserError("scaling measures a registered task's throughput; your own command reports none")
    return subs


def measure(sub, timeout_s: float) -> Dict[str, Any]:
    job_id = queue(sub)
    print(submitted(sub, job_id))  # run-cluster scaling: a command, it says what it queued
    run_dir = Path(sub.job.work.run_dir)
    state = drain(watch(adapter(sub.job.scheduler), job_id, run_dir, timeout_s))["state"]
    results = run_dir / "results.json"
    if state != State.COMPLETED or not results.is_file():
        raise UserError(f"the {sub.job.profile} job ended {state.value} without results; see bin/run-cluster logs "
                        f"{run_dir}")
    found = json.loads(results.read_text())
    if not found.get("throughput"):
        raise UserError(f"{results} has no throughput: the image predates it; rebuild it (make image)")
    runs.update_manifest(run_dir, scaling=True)
    return {"profile": sub.job.profile, "nodes": sub.job.placement.nodes, "ranks_per_node": sub.job.work.ranks_per_node,
            "ranks": sub.job.total_ranks, "samples_per_s": found["throughput"]["samples_per_s"],
            "device": found.get("gpu") or "cpu", "run": run_dir.name}


def efficiency(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    base = rows[0]["samples_per_s"]
    for row in rows:
        row["speedup"] = row["samples_per_s"] / base
        row["efficiency"] = row["samples_per_s"] / (row["ranks"] * base)
        row["scope"] = "one node" if row["nodes"] == 1 else "across nodes"
        row["target"] = TARGETS[row["scope"]] if row["ranks"] > 1 else None
        row["below_target"] = row["target"] is not None and row["efficiency"] < row["target"]
    return rows


def label(rows: List[Dict[str, Any]]) -> str:
    devices = sorted({str(r["device"]) for r in rows})
    if devices == ["cpu"]:
        return "CPU processes, not GPUs: these figures show the method, not a GPU's scaling"
    return ", ".join(devices)


def write(out: Path, cluster: str, experiment: str, rows: List[Dict[str, Any]]) -> None:
    out.mkdir(parents=True)
    (out / "scaling.json").write_text(json.dumps({"cluster": cluster, "experiment": experiment, "device": label(rows),
                                                  "targets": TARGETS, "rows": rows}, indent=2) + "\n")
    plot(rows, label(rows), out / "scaling.png")


def plot(rows: List[Dict[str, Any]], device: str, path: Path) -> None:
    fig = pyplot_figure()(figsize=(6, 4))
    ax = fig.subplots()
    ranks = [r["ranks"] for r in rows]
    ax.plot(ranks, [100.0] * len(ranks), "k--", label="ideal")
    ax.plot(ranks, [100 * r["efficiency"] for r in rows], "o-", label="measured")
    for scope, target in TARGETS.items():
        ax.axhline(100 * target, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"target {scope} {target:.0%}", (ranks[-1], 100 * target), fontsize=7, ha="right", va="top")
    for r in rows:
        ax.annotate(r["profile"], (r["ranks"], 100 * r["efficiency"]), fontsize=7, xytext=(5, 5),
                    textcoords="offset points", color="red" if r["below_target"] else "black")
    top = max(110, 110 * max(r["efficiency"] for r in rows))  # a CPU's super-linear points stay in the picture
    ax.set(xlabel="GPUs (ranks)", ylabel="scaling efficiency (%)", xticks=ranks, ylim=(0, top),
           title=f"throughput_N / (N x throughput_1)\n{device}")
    ax.title.set_fontsize(8)
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def render(rows: List[Dict[str, Any]], out: Optional[Path]) -> str:
    lines = [f"{'profile':20s} {'shape':>7s} {'samples/s':>10s} {'speedup':>8s} {'efficiency':>10s}  target"]
    for r in rows:
        target = f">= {r['target']:.0%} ({r['scope']})" if r["target"] else "baseline"
        flag = "  BELOW TARGET" if r["below_target"] else ""
        lines.append(f"{r['profile']:20s} {r['nodes']:>3d}x{r['ranks_per_node']:<3d} {r['samples_per_s']:>10.1f} "
                     f"{r['speedup']:>7.2f}x {r['efficiency']:>10.1%}  {target}{flag}")
    lines.append(f"device: {label(rows)}")
    if out:
        lines.append(f"wrote {out}/scaling.json and {out}/scaling.png")
    return "\n".join(lines)
