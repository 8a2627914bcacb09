"""The cloud's own bill for a period, beside what the jobs cost: the shape every cloud's reader answers in.

Each cloud's folder has a `bill.py` with `read(spec, window, env, api=None) -> Bill` (`api`: the cloud's client,
injected by tests); a cloud whose bill cannot be read from the laptop says why in its Bill, with no amount.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from goldenenv.jobcost import Window


@dataclass(frozen=True)
class Bill:
    amount: float | None
    """The bill's figure for the period; None where it is not read from here (`words` says why)."""
    currency: str
    period: str
    """The period the figure covers, in the bill's own terms (days, a month on the bill's clock)."""
    words: str
    """Where the figure comes from, or why there is none."""

    def to_dict(self) -> dict:
        return {"amount": self.amount, "currency": self.currency, "period": self.period, "source": self.words}


def not_read(cloud: str, why: str, period: str = "") -> Bill:
    return Bill(None, "", period, f"the bill is not read from here for {cloud}: {why}")


def days(window: Window) -> tuple[date, date]:
    """The whole days covering the window: the first, and the day after the last (exclusive, as bill APIs take)."""
    last = window.until - timedelta(microseconds=1)
    return window.since.date(), last.date() + timedelta(days=1)


def whole_month(window: Window) -> str | None:
    """YYYY-MM when the window is one calendar month (the bills that are read by month), else None."""
    first = window.since
    if (first.day, first.hour, first.minute, first.second) != (1, 0, 0, 0):
        return None
    following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return f"{first:%Y-%m}" if window.until == following else None


def missing(env, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if not env.get(name)]


@dataclass(frozen=True)
class MonthlyBill:
    """A bill read by whole months on Beijing time (Alibaba, Tencent, Huawei): which API and what grant it needs."""

    cloud: str
    api: str
    """The API action that reads it, named in the refusals (DescribeBillSummaryByTag ...)."""
    credentials: tuple[str, ...]
    """The environment variables holding the caller's key."""
    grant: str
    """What the key must be allowed, in the cloud's words."""
    unit: str = "whole months"

    def asked(self, window: Window, env, api) -> tuple[str, str] | Bill:
        """The month and its period, or the Bill saying why it is not read: a window that is not one calendar month,
        or (with no `api` given) a key missing from the environment."""
        month = whole_month(window)
        if month is None:
            return not_read(self.cloud, f"its bill is read by {self.unit} ({self.api}): give --month YYYY-MM")
        period = f"{month}, Beijing time (UTC+8)"
        lacking = missing(env, self.credentials) if api is None else []
        if lacking:
            return not_read(self.cloud, f"set {' and '.join(lacking)} ({self.grant}) to read it", period)
        return month, period
