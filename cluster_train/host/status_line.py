"""The command line's view of a long wait's Progress events (cluster_train/host/progress.py): on a terminal one
status line rewritten in place (\\r, cut to the terminal's width, cleared at the end); anything else (a pipe, a CI log,
a file) gets plain lines at a sane rate: the first once it has lasted 2 s, each new stage, every 10 % and every 30 s,
and the last.
Written here, not with tqdm or rich: neither prints plain periodic lines to a pipe, and the login-node install stays
pyyaml and jinja2."""
import contextlib
import os
import sys
import time
from typing import Callable, Iterator, Optional, TextIO

from cluster_train.host.progress import Progress

CLEAR = "\r\x1b[K"  # to the line's start, then erase to its end


def duration(seconds: float) -> str:
    """1h02m, 1m20s, 7s."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s" if rest >= 60 else f"{rest}s"


def amount(count: float, unit: str) -> str:
    return f"{count / 1e6:.1f} MB" if unit == "B" else f"{count:.0f}{unit}"


def describe(p: Progress) -> str:
    """One line: what, how far, how fast, how long left (else how long so far), what it is doing."""
    parts = []
    if p.unit == "B":
        parts.append(f"{amount(p.done, 'B')} of {amount(p.total, 'B')} ({100 * p.fraction:.0f} %)" if p.total
                     else amount(p.done, "B"))
    if p.rate is not None and p.unit == "B":
        parts.append(f"{p.rate / 1e6:.1f} MB/s")
    if p.eta_s is not None and not p.final:
        parts.append(f"{duration(p.eta_s)} left")
    elif p.elapsed_s >= 1:
        parts.append(f"{'in ' if p.final else ''}{duration(p.elapsed_s)}")
    if p.resumed_from:
        parts.append(f"resuming from {amount(p.resumed_from, p.unit)}")
    said = ", ".join(([p.stage] if p.stage else []) + parts)
    return f"{p.label}: {said}" if said else p.label


class StatusLine:
    """A `report` for the library's long waits, writing to `stream` (standard error unless told)."""

    def __init__(self, stream: Optional[TextIO] = None, tty: Optional[bool] = None, width: Optional[int] = None,
                 clock: Callable[[], float] = time.monotonic, every_s: float = 30.0, step: float = 0.1,
                 first_s: float = 2.0):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.width, self.clock, self.every_s, self.step, self.first_s = width, clock, every_s, step, first_s
        self.shown = ""  # what the terminal's status line holds now
        self.said: Optional[Progress] = None  # the last event written as a plain line
        self.said_at = 0.0

    def __call__(self, p: Progress) -> None:
        if self.tty:
            self._draw(describe(p))
        elif self._due(p):
            self.stream.write(describe(p) + "\n")
            self.stream.flush()
            self.said, self.said_at = p, self.clock()

    def _due(self, p: Progress) -> bool:
        """A plain line for the first event (a stage, or after first_s), the last, a new stage, each `step` of the way
        and every `every_s`."""
        last = self.said
        if last is None:  # a wait that ends (or fails) within first_s says only its end, or nothing
            return p.final or bool(p.stage) or p.elapsed_s >= self.first_s
        if p.final or p.stage != last.stage or p.label != last.label:
            return True
        if p.fraction == 1:  # all there, not yet ended: the final line says it
            return False
        if p.fraction is not None and last.fraction is not None and self._tenth(p) > self._tenth(last):
            return True
        return self.clock() - self.said_at >= self.every_s

    def _tenth(self, p: Progress) -> int:
        return int(p.fraction / self.step + 1e-9)

    def _columns(self) -> int:
        if self.width:
            return self.width
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80  # 0: a pty nobody sized
        except (OSError, ValueError, AttributeError):
            return 80

    def _draw(self, text: str, again: bool = False) -> None:
        cut = text[:max(1, self._columns() - 1)]  # the last column would wrap on some terminals
        if cut == self.shown and not again:
            return
        self.shown = cut
        self.stream.write(CLEAR + self.shown)
        self.stream.flush()

    def above(self, text: str, out: Optional[TextIO] = None) -> None:
        """Text (a job's log) written above the status line, which is drawn again under it."""
        out = out or sys.stdout
        if self.tty and self.shown:
            self.stream.write(CLEAR)
            self.stream.flush()
        out.write(text)
        out.flush()
        if self.tty and self.shown:
            self._draw(self.shown, again=True)

    def close(self) -> None:
        """The terminal's status line erased (what ended is said by the command, in its own words)."""
        if self.tty and self.shown:
            self.stream.write(CLEAR)
            self.stream.flush()
            self.shown = ""


@contextlib.contextmanager
def shown_progress(stream: Optional[TextIO] = None) -> Iterator[StatusLine]:
    """A StatusLine for the length of a `with` block, its line erased at the end however the block ends."""
    shown = StatusLine(stream)
    try:
        yield shown
    finally:
        shown.close()
