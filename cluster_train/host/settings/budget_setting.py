"""The settings' `budget:` (runs/budget.py uses it): GPU-hours over a period, checked where settings are read."""
import datetime
import re
from dataclasses import dataclass
from typing import Any

from cluster_train.shared.errors import UserError

ROLLING = re.compile(r"^(\d+)d$")
EXAMPLE = "budget: {gpu_hours: 500, period: 30d} (period: Nd, month, year or a start date YYYY-MM-DD)"


@dataclass(frozen=True)
class Budget:
    gpu_hours: float
    since: datetime.datetime
    period: str  # as written, for messages
    account: str = ""


def parse(value: Any, where: str, now: datetime.datetime) -> Budget:
    """The settings' `budget:`, checked: one line naming what is wrong and the form it takes."""
    if not isinstance(value, dict) or set(value) - {"gpu_hours", "period", "account"}:
        raise UserError(f"{where}: budget {value!r} is not a budget; write {EXAMPLE}")
    hours, period = value.get("gpu_hours"), str(value.get("period", "30d"))
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or hours <= 0:
        raise UserError(f"{where}: budget gpu_hours {hours!r} is not a positive number of GPU-hours; write {EXAMPLE}")
    return Budget(float(hours), period_start(period, where, now), period, str(value.get("account") or ""))


def period_start(period: str, where: str, now: datetime.datetime) -> datetime.datetime:
    rolling = ROLLING.match(period)
    if rolling and int(rolling[1]) > 0:
        return now - datetime.timedelta(days=int(rolling[1]))
    if period in ("month", "year"):
        return now.replace(**({"day": 1} if period == "month" else {"month": 1, "day": 1}),
                           hour=0, minute=0, second=0, microsecond=0)
    try:
        return datetime.datetime.strptime(period, "%Y-%m-%d")
    except ValueError:
        raise UserError(f"{where}: budget period {period!r} is not a period; write {EXAMPLE}") from None
