"""The API's plain values and the types of its arguments, apart from the modules that make them (job.py,
over_ssh.py), which both use them; and the door's check of an argument's type (`checked_number`), which every public
method calls on its numbers, so a wrong kind is one line naming it, not a TypeError from deep inside."""
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from cluster_train.shared.errors import UserError
from cluster_train.host.api.run import Run

After = Sequence[Union[Run, str, Path]]  # runs, by Run, run id or run directory


@dataclass(frozen=True)
class DryRun:
    """What a submission would queue, with nothing written: the job script, the resolved run config, the summary
    the command line shows and its warnings."""

    script: str
    config: Dict[str, Any]
    summary: str
    warnings: List[str]


def checked_number(name: str, value: Any, *, above: Optional[float] = None, whole: bool = False,
                   none_ok: bool = False) -> Any:
    """`value` of the parameter `name`, refused in one line where it is not a number (a whole one if `whole`; None
    only if `none_ok`) or not more than `above`; the value as given."""
    if value is None and none_ok:
        return value
    kind = "a whole number" if whole else "a number"
    example = "2" if whole else "600"
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        raise UserError(f"{name}={value!r} must be {kind}{' or None' if none_ok else ''}, e.g. {name}={example}")
    if above is not None and not value > above:
        raise UserError(f"{name}={value!r} must be more than {above:g}, e.g. {name}={example}")
    return value
