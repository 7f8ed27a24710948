"""STUB for the function branch (owner: api-run): only what FunctionRun needs, `Run(path)`, `.path`, `.id` and
`.wait(timeout)` returning the RunStatus fields FunctionRun reads (`shown`, `cause`); the lead takes api-run's train/host/api/run.py at the merge."""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from train.host.runs import segments

ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "TERMINATED", "CANCELLED", "NODE_FAIL")


@dataclass
class RunStatus:
    shown: str
    cause: str = ""


class Run:
    def __init__(self, path_or_id: Union[str, Path]) -> None:
        self.path = Path(path_or_id)

    @property
    def id(self) -> str:
        return self.path.name

    def wait(self, timeout: Optional[float] = None) -> RunStatus:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = segments.read(self.path)
            if found and found[-1].how in ENDED:
                return RunStatus(found[-1].how)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.id} did not end within {timeout} s")
            time.sleep(1)
