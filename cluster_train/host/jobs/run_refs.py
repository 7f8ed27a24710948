"""Runs a job waits on, as the job builder sees them: `${run:<id>}`, a run's directory named by its id in a --set
value, so that a stage reads what an earlier one wrote (`--set task_params.experts_dir='${run:<id>}/checkpoints/x'`),
and `Waited`, a run whose job the new job waits on (checked and found by cluster_train/host/runs/after.py, which the
jobs room does not import: it reads runs only through what the runs room gives it).

`${run:<id>}` is resolved once, when the job is built, to the absolute directory (the run config and its manifest
hold the path, so a rerun reads the same one): a run the job waits on (--after, a pipeline's earlier stage), else a
run directory in this cluster's run root. A run id that names neither is refused before anything is queued; a path
inside a run the job waits on may not exist yet, since that run writes it before the job starts."""
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Sequence

from cluster_train.shared.errors import UserError
from cluster_train.host import project

RUN_REF = re.compile(r"\$\{run:([^}]*)\}")


@dataclass(frozen=True)
class Waited:
    """A run the new job waits on: its id, its job's id and its directory (the manifest's `after` entries)."""

    run_id: str
    job_id: str
    run_dir: str

    def record(self) -> Dict[str, str]:
        return asdict(self)


def expand_overrides(overrides: Mapping[str, Any], awaited: Dict[str, Path], root: Path) -> Dict[str, Any]:
    """The typed overrides with each ${run:<id>} of a str value made that run's directory: a run of `awaited` (by
    id), else runs/<id> under `root`, this cluster's run root."""
    return {key: RUN_REF.sub(lambda found: str(run_dir_of(found.group(1), awaited, root)), value)
            if isinstance(value, str) else value for key, value in overrides.items()}


def run_dir_of(run_id: str, awaited: Dict[str, Path], root: Path) -> Path:
    if run_id in awaited:
        return Path(awaited[run_id]).resolve()
    if not project.RUN_ID.match(run_id):
        raise UserError(f"${{run:{run_id}}}: {run_id!r} is not a run id; write ${{run:<id>}} with the id of a run "
                        f"(its directory's name)")
    if not (root / run_id).is_dir():
        raise UserError(f"${{run:{run_id}}}: no run {run_id!r} in {root}; check the run id (run-cluster runs lists "
                        f"them)")
    return (root / run_id).resolve()


def inside(path: str, dirs: Sequence[Path]) -> bool:
    """Whether `path` lies in one of `dirs` (runs the job waits on: what they write exists when it starts)."""
    target = Path(path).resolve()
    return any(target == Path(d).resolve() or Path(d).resolve() in target.parents for d in dirs)
