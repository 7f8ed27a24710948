"""`trainer.checkpoint_every`: how often a run saves mid-epoch into the checkpoint it resumes from, so the work a
killed segment loses is bounded by time (`20m`, `90s`, `2h`) or by training steps (`500`); null is off.

Torch-free: the login node refuses a bad value before anything is queued; the image turns a good one into
Lightning's ModelCheckpoint arguments (cluster_train/image/trainer.py)."""
import re
from typing import Any, Optional, Tuple

from cluster_train.shared.errors import UserError

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smh])")


def interval(value: Any) -> Tuple[Optional[int], Optional[float]]:
    """(steps, seconds) of a checkpoint_every value, one of them set; (None, None) when off. Raises UserError."""
    if value is None:
        return None, None
    text = str(value).strip()
    if not isinstance(value, bool) and text.isdigit() and int(text) >= 1:
        return int(text), None
    match = None if isinstance(value, bool) else _DURATION.fullmatch(text)
    if match and float(match.group(1)) * UNIT_SECONDS[match.group(2)] >= 1:
        return None, float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    raise UserError(f"config key 'trainer.checkpoint_every' = {repr(value)[:40]} must be a number of training steps "
                    f"(like 500) or a duration of at least 1 s (like 90s, 20m or 2h); null turns it off")
