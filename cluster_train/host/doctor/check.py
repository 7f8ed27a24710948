"""One check's finding (`Check`: ok, warning or problem, what was found, the fix) and the one way checks run a
command on this machine."""
import subprocess
from dataclasses import dataclass
from typing import List, Optional

OK, WARNING, PROBLEM = "ok", "warning", "problem"


@dataclass(frozen=True)
class Check:
    state: str  # OK, WARNING (a job still runs) or PROBLEM (a job would be refused or fail)
    what: str  # what was checked and what was found
    fix: str = ""  # for a warning or a problem: what to do

    def line(self) -> str:
        return f"{self.state:<8} {self.what}" + (f"; fix: {self.fix}" if self.fix else "")


def run(command: List[str], timeout: float = 30, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """The command's result; a program that is missing or does not answer in time reads as a failure with the
    reason in stderr, so a hung tool is one check's problem, not the end of the others."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "", f"{command[0]} did not finish in {timeout:.0f} s")
    except OSError as err:
        return subprocess.CompletedProcess(command, 127, "", f"{command[0]}: {err.strerror}")


def last_line(done: subprocess.CompletedProcess) -> str:
    """What a failed command said last (its complaint), else its exit status."""
    said = (done.stderr or done.stdout).strip().splitlines()
    return said[-1] if said else f"exit status {done.returncode}"
