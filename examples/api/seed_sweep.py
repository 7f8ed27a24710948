"""A seed sweep: one run per seed (one job array), the best by validation accuracy, then that run again exactly (same
image digest, code and config).

    python examples/api/seed_sweep.py gilbreth single_node_4gpu cifar100_resnet --seeds 1 2 3
    python examples/api/seed_sweep.py ci-slurm n1_gpu1 demo --seeds 1 2 --set trainer.max_epochs=1   # a test's size
"""
import argparse

import cluster_train as ct


def main() -> None:
    args = arguments()
    job = ct.Job(args.cluster, args.profile, args.experiment, overrides=args.set)
    sweep = job.sweep({"seed": args.seeds}, max_parallel=args.max_parallel)  # checked in full, then queued
    print(f"sweep {sweep.path}: {len(sweep.runs)} runs", flush=True)
    completed = [run for run in sweep.runs if run.wait(timeout=args.timeout).state == ct.State.COMPLETED]
    if not completed:
        raise SystemExit(f"no run of sweep {sweep.path} completed: bin/run-cluster status {sweep.path}")
    best = max(completed, key=lambda run: run.results()["final_val_acc"])
    print(f"best: {best.path} (seed {best.config['seed']}), val acc {best.results()['final_val_acc']:.3f}")
    again = best.rerun()
    status = again.wait(timeout=args.timeout)
    if status.state != ct.State.COMPLETED:
        raise SystemExit(f"rerun {again.path} ended {status.state.value}: {status.cause}")
    print(f"rerun: {again.path} COMPLETED, val acc {again.results()['final_val_acc']:.3f}")


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cluster", help="a name in clusters/ or a cluster YAML")
    p.add_argument("profile")
    p.add_argument("experiment", help="a name in experiments/ or an experiment YAML")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--max-parallel", type=int, default=None, help="at most this many runs at once")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override, as run-cluster")
    p.add_argument("--timeout", type=float, default=48 * 3600, help="seconds to wait for each run")
    return p.parse_args()


if __name__ == "__main__":
    main()
