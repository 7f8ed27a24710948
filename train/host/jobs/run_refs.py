"""`${run:<id>}`: a finished (or awaited) run's directory, named by its run id in a config value, so that a stage
reads what an earlier stage wrote: `--set task_params.experts_dir='${run:<id>}/task-1-resnet/checkpoints/resnet_cifar'`.

Written in --set values, in a profile's task `set:` values and in your settings' variables those refer to; resolved
once, when the job is built, to the absolute directory (the run config and its manifest hold the path, so a rerun
reads the same one). A run id that names no run is refused before anything is queued; the path inside it may not
exist yet where the job waits on that run (--after), since the run writes it before the job starts."""
import re
from pathlib import Path
from typing import Dict, List

from train.shared.errors import UserError
from train.host import project, runs

RUN_REF = re.compile(r"\$\{run:([^}]*)\}")


def expand(text: str, planned: Dict[str, Path]) -> str:
    """`text` with each ${run:<id>} replaced by that run's directory; `planned`: the run directories of a pipeline's
    stages not queued yet, by run id (they count as existing runs)."""
    return RUN_REF.sub(lambda found: str(run_dir_of(found.group(1), planned)), text)


def expand_overrides(overrides: List[str], planned: Dict[str, Path]) -> List[str]:
    """--set KEY=VALUE words with their ${run:<id>} resolved (only the value: a key names no run)."""
    expanded = []
    for word in overrides:
        key, sep, value = word.partition("=")
        expanded.append(key + sep + expand(value, planned) if sep else word)
    return expanded


def run_dir_of(run_id: str, planned: Dict[str, Path]) -> Path:
    if run_id in planned:
        return Path(planned[run_id]).resolve()
    if not project.RUN_ID.match(run_id):
        raise UserError(f"${{run:{run_id}}}: {run_id!r} is not a run id; write ${{run:<id>}} with the id of a run "
                        f"(its directory's name)")
    try:
        found = runs.find(run_id)
    except UserError as err:
        raise UserError(f"${{run:{run_id}}}: {err}") from None
    if not (found / runs.MANIFEST).is_file():
        raise UserError(f"${{run:{run_id}}}: no run {run_id!r} (no {runs.MANIFEST} in {found}); check the run id "
                        f"(run-cluster runs lists them)")
    return found.resolve()


def inside(path: str, dirs: List[Path]) -> bool:
    """Whether `path` lies in one of `dirs` (runs the job waits on: what they write exists when it starts)."""
    target = Path(path).resolve()
    return any(target == Path(d).resolve() or Path(d).resolve() in target.parents for d in dirs)
