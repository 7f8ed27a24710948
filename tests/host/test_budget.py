"""The settings' GPU-hour budget (issue 46): its periods and the one-line refusals of a budget that is not one."""
import datetime

import pytest

from cluster_train.shared.errors import UserError
from cluster_train.host.settings.budget_setting import parse

NOW = datetime.datetime(2026, 11, 27, 15, 30)


@pytest.mark.parametrize("period, since", [("30d", datetime.datetime(2026, 10, 28, 15, 30)),
                                           ("month", datetime.datetime(2026, 11, 1)),
                                           ("year", datetime.datetime(2026, 1, 1)),
                                           ("2026-09-01", datetime.datetime(2026, 9, 1))])
def test_a_period_starts_where_it_says(period, since):
    budget = parse({"gpu_hours": 500, "period": period, "account": "lab"}, "settings", NOW)
    assert (budget.gpu_hours, budget.since, budget.account) == (500.0, since, "lab")


@pytest.mark.parametrize("value, said", [
    ({"gpu_hours": 0}, "budget gpu_hours 0 is not a positive number of GPU-hours"),
    ({"gpu_hours": True}, "budget gpu_hours True is not a positive number"),
    ({"gpu_hours": 5, "period": "fortnight"}, "budget period 'fortnight' is not a period"),
    ({"gpu_hours": 5, "period": "0d"}, "budget period '0d' is not a period"),
    ({"gpu_hours": 5, "per": "30d"}, "is not a budget"),
    (500, "budget 500 is not a budget")])
def test_a_budget_that_is_not_one_is_one_line_naming_the_value_and_the_form(value, said):
    with pytest.raises(UserError) as err:
        parse(value, "settings", NOW)
    assert said in str(err.value) and "budget: {gpu_hours: 500, period: 30d}" in str(err.value)
    assert len(err.value.lines) == 1
