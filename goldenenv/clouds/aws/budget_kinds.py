"""Which notifications an AWS budget has, as plain data: a (threshold, type) pair each.

Shared by the budget component (budget.py, which creates them) and the check of the configuration against AWS
Budgets' cap on notifications (limits.check_spec), so both count the same notifications. Here, below both, it
keeps limits.py from importing budget.py (which imports teardown.py, which imports limits.py).
"""

from __future__ import annotations

from collections.abc import Iterable

HARD_STOP_PERCENT = 100
"""The actual-spend threshold whose notification runs the hard stop."""
ACTUAL = "ACTUAL"
FORECASTED = "FORECASTED"


def notification_kinds(actual: Iterable[int], forecast: Iterable[int], hard_stop: bool) -> list[tuple[int, str]]:
    """(threshold, type) of every notification the budget has: ACTUAL per alert threshold, with 100 % added for
    the hard stop when absent, then FORECASTED per forecast threshold; each pair once (Budgets refuses duplicates)."""
    actual_levels = set(actual) | ({HARD_STOP_PERCENT} if hard_stop else set())
    return [(t, ACTUAL) for t in sorted(actual_levels)] + [(t, FORECASTED) for t in sorted(set(forecast))]
