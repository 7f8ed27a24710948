"""A Python function run inside the pinned image, from this directory's code: its return value comes back, and a
requeued job goes on from where its time-limit warning stopped it.

    cd examples/api && python function_call.py ci-slurm n1_gpu1
"""
import os
import sys
import time

from cluster_train.host.api.function import Call, Executor


def square(x: int) -> int:
    return x * x


class CountTo:
    """Counts to n in small steps. On the job's time-limit warning its checkpoint hands the requeued job this object,
    with the count it reached: the next segment goes on from there."""

    def __init__(self) -> None:
        self.done = 0

    def __call__(self, n: int) -> str:
        while self.done < n:
            time.sleep(0.1)
            self.done += 1
        return f"counted to {self.done} (this segment resumed: {os.environ.get('CT_RESUMED')})"

    def checkpoint(self, n: int) -> Call:
        return Call(self, n)


if __name__ == "__main__":
    from function_call import CountTo, square  # by their module's name, which the image imports them by

    executor = Executor(*sys.argv[1:3])
    print(executor.submit(square, 7).result(timeout=600))
    print(executor.submit(CountTo(), 50).result(timeout=600))
