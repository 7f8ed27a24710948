"""Seed 001 in one call: the experts stage, then fusion over their weights, which the scheduler starts only once the
experts have COMPLETED (and cancels, saying why, if they fail). The stages are the cluster file's `pipelines: seed001`.

    python examples/api/seed001_pipeline.py ci-slurm
    python examples/api/seed001_pipeline.py ci-lsf --set trainer.max_epochs=1 --set data.root=/data/c100   # smaller
"""
import argparse
import json

import cluster_train as ct


def main() -> None:
    args = arguments()
    pipeline = ct.Pipeline(args.cluster, args.pipeline, overrides=args.set)
    stages = pipeline.submit()  # every stage checked, then each queued after the stages it names
    for name, run in zip(pipeline.stages, stages):
        status = run.wait(timeout=args.timeout)
        print(f"{name}: {run.path} {status.state.value}{f' ({status.cause})' if status.cause else ''}")
        if status.state != ct.State.COMPLETED:
            raise SystemExit(f"stage {name} did not complete: bin/run-cluster logs {run.path}")
    print(json.dumps(stages[-1].results(), indent=2))


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cluster", help="a cluster whose file has the pipeline (ci-slurm, ci-lsf, ...)")
    p.add_argument("--pipeline", default="seed001")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every stage")
    p.add_argument("--timeout", type=float, default=48 * 3600, help="seconds to wait for each stage")
    return p.parse_args()


if __name__ == "__main__":
    main()
