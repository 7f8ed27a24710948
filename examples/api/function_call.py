"""A Python function run inside the pinned image, from this directory's code: its return value comes back, and a
requeued job goes on from where its time-limit warning stopped it. Run it from this directory (the image imports
the functions from its snapshot, by this module's name):

    cd examples/api && python function_call.py ci-slurm n1_gpu1
"""
import argparse
import os
import time

import cluster_train as ct


def square(x: int) -> int:
    return x * x


class CountTo:
    """Counts to n in small steps. On the job's time-limit warning its checkpoint hands the requeued job this object,
    with the count it reached: the next segment goes on from there."""

    def __init__(self) -> None:
        self.done = 0
        self.segments: list = []

    def __call__(self, n: int) -> str:
        self.segments.append(os.environ.get("CT_RESUMED", "0"))  # "1" in a segment after a requeue
        while self.done < n:
            print(f"counted {self.done}", flush=True)
            time.sleep(0.1)
            self.done += 1
        return f"counted to {self.done} in {len(self.segments)} segment(s)"

    def checkpoint(self, n: int) -> ct.Call:
        return ct.Call(self, n)  # what the requeued job calls: this object, as far as it got


def main() -> None:
    from function_call import CountTo, square  # by their module's name, which the image imports them by

    args = arguments()
    executor = ct.Executor(args.cluster, args.profile, overrides=args.set)
    print(f"square(7) = {executor.submit(square, 7).result(timeout=args.timeout)}")
    counting = executor.submit(CountTo(), args.count)
    print(f"counting: {counting.path}", flush=True)
    try:
        print(counting.result(timeout=args.timeout))
    except ct.FunctionError as err:  # it raised in the image: the remote traceback is in the message
        raise SystemExit(str(err))


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cluster", help="a name in clusters/ or a cluster YAML")
    p.add_argument("profile")
    p.add_argument("--count", type=int, default=600, help="steps of 0.1 s to count")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override, as run-cluster")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for each call")
    return p.parse_args()


if __name__ == "__main__":
    main()
