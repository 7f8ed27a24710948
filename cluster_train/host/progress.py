"""Progress of the long waits (an image or data image sent over SSH, pushed or pulled; an image built; a data set
packed; a job followed to its end; a sweep's elements ending), as events: the library calls a `report` callable with
a Progress and never prints; the command line renders them (cluster_train/host/status_line.py), a script passes its
own callable or none. The parsers here read the tools' own progress output (rsync --info=progress2, apptainer build,
the training's rank-0 epoch lines) into numbers."""
import re
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Optional


@dataclass(frozen=True)
class Progress:
    """One moment of a long wait. `done`/`total` count `unit`s ("B": bytes; "": nothing to count);
    `rate` is units per second and `eta_s` the seconds left, where known; `resumed_from`: units that were already
    there when it started (an interrupted transfer resumed); `stage`: what it is doing now, in words (a build's
    step, a run's epoch, a sweep's counts): a new stage is worth a line of its own; `final`: the last event."""

    label: str
    done: float = 0
    total: Optional[float] = None
    unit: str = "B"
    rate: Optional[float] = None
    eta_s: Optional[float] = None
    resumed_from: float = 0
    stage: str = ""
    elapsed_s: float = 0
    final: bool = False

    @property
    def fraction(self) -> Optional[float]:
        return min(1.0, self.done / self.total) if self.total else None


Report = Callable[[Progress], None]


def ignore(_: Progress) -> None:
    """The report of whoever does not watch."""


class Meter:
    """Progress events of one wait, the rate and the time left measured from what arrived since it started (what
    was already there when a transfer resumed does not count as speed)."""

    def __init__(self, label: str, total: Optional[float] = None, unit: str = "B", resumed_from: float = 0,
                 clock: Callable[[], float] = time.monotonic):
        self.clock, self.started = clock, clock()
        self.last = Progress(short(label), resumed_from, total, unit, resumed_from=resumed_from)

    def at(self, done: Optional[float] = None, stage: Optional[str] = None, final: bool = False) -> Progress:
        done = self.last.done if done is None else done
        elapsed = self.clock() - self.started
        rate = (done - self.last.resumed_from) / elapsed if elapsed > 0.5 and done > self.last.resumed_from else None
        left = (self.last.total - done) / rate if rate and self.last.total else None
        self.last = replace(self.last, done=done, rate=rate, eta_s=max(0.0, left) if left is not None else None,
                            stage=self.last.stage if stage is None else stage, elapsed_s=elapsed, final=final)
        return self.last


def short(text: str) -> str:
    """Every sha256 in a label cut to its first 12 digits, as `images list` shows them: a status line is one line."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}\b", r"\1", text)


# ---- the tools' own progress output ------------------------------------------------------------------------------

RSYNC_PROGRESS = re.compile(r"^\s*([\d,]+)\s+(\d+)%")  # rsync --info=progress2: "  11,042,816  36%  9.97MB/s ..."


def rsync_done(piece: str) -> Optional[int]:
    """The bytes rsync --info=progress2 says it has done, from one of its \\r-ended pieces; None for other output."""
    found = RSYNC_PROGRESS.match(piece)
    return int(found.group(1).replace(",", "")) if found else None


def pieces(chunks: Iterable[bytes]) -> Iterator[str]:
    """Text that arrives in chunks, cut at every \\r and \\n (a progress bar rewrites its line with \\r)."""
    pending = ""
    for chunk in chunks:
        *whole, pending = re.split(r"[\r\n]", pending + chunk.decode(errors="replace"))
        yield from whole
    if pending:
        yield pending


BUILD_STEPS = (  # what `apptainer build` says as it starts each step (INFO: ...) -> the step's name
    (("Starting build", "Fetching", "Extracting"), "bootstrap"), (("Running setup scriptlet",), "%setup"),
    (("Copying",), "%files"), (("Running post scriptlet",), "%post"), (("Adding",), "metadata"),
    (("Running testscript",), "%test"), (("Creating SIF file",), "SIF file"))


def build_stage(line: str) -> Optional[str]:
    """Which step `apptainer build` starts with this line of its output ("INFO:    Running post scriptlet" ->
    "step 4/7: %post"); None for any other line (a scriptlet's own output)."""
    said = line.removeprefix("INFO:").strip() if line.startswith("INFO:") else ""
    for number, (starts, name) in enumerate(BUILD_STEPS, 1):
        if said.startswith(starts):
            return f"step {number}/{len(BUILD_STEPS)}: {name}"
    return None


EPOCH = re.compile(r"\[cluster-train\] epoch (\d+)/(\d+) step (\d+)(?: train/loss (\S+))?")


def epoch_stage(log_text: str) -> Optional[str]:
    """The last epoch line rank 0 wrote in this text ("epoch 2/5 step 40 train/loss 0.6931"), None if none."""
    found = list(EPOCH.finditer(log_text))
    if not found:
        return None
    epoch, epochs, step, loss = found[-1].groups()
    return f"epoch {epoch}/{epochs} step {step}" + (f" train/loss {loss}" if loss else "")
