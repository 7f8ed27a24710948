"""`make image`'s view of `apptainer build` (containers/images.mk runs it through here): every line of the build goes
to a log file, kept; what is shown is the step it is at and for how long ("step 4/7: %post, 1m20s"), as a status
line on a terminal, a plain line per step elsewhere; a failed build shows the log's last lines and where the whole
log is. Standard library only: `make` runs it with the host's python3.

    python3 -m cluster_train.host.images.build_log --log images/cpu.build.log --label "building images/cpu.sif" \\
        -- apptainer build ...
"""
import argparse
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import List

from cluster_train.host.progress import Meter, Report, build_stage
from cluster_train.host.status_line import shown_progress

TAIL_LINES = 40  # of the log, shown when the build fails
TICK_S = 1.0  # the status line's clock moves on while a step is quiet


def run_logged(argv: List[str], log: Path, label: str, report: Report) -> int:
    """The command, its standard output and error written to `log` as they come; the step reported at each line
    that starts one, and every TICK_S. Its exit status."""
    meter = Meter(label, unit="")
    log.parent.mkdir(parents=True, exist_ok=True)
    pending = b""  # the start of a line whose end has not arrived
    with log.open("wb") as kept:
        build = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for chunk in chunks(build.stdout.fileno()):
            kept.write(chunk)
            kept.flush()
            *whole, pending = (pending + chunk).split(b"\n")
            for line in whole:
                stage = build_stage(line.decode(errors="replace"))
                if stage:
                    report(meter.at(stage=stage))
            report(meter.at())
        status = build.wait()
    report(meter.at(stage="done" if status == 0 else f"failed at {meter.last.stage or 'its start'}", final=True))
    return status


def chunks(fd: int):
    """What arrives on `fd`, as it comes; b"" every TICK_S of silence (the caller's clock ticks)."""
    while True:
        ready, _, _ = select.select([fd], [], [], TICK_S)
        if not ready:
            yield b""
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        yield chunk


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="build_log", description=__doc__.split("\n\n")[0])
    p.add_argument("--log", type=Path, required=True, help="where the whole build log is kept")
    p.add_argument("--label", default="building", help="what the status line calls the build")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the build command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    with shown_progress() as shown:
        status = run_logged(command, args.log, args.label, shown)
    if status != 0:
        lines = args.log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        print("\n".join(lines), file=sys.stderr)
        print(f"{command[0]} failed (exit status {status}); the whole log: {args.log}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
