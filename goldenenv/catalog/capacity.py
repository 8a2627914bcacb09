"""What a cloud's error code rules out when `goldenenv up` fails (data/capacity_errors.csv).

The failover loop (goldenenv.failover) moves a cluster on, retries or stops by these rows alone: no error code is
classified anywhere in code, so a wrong class is a one-line fix in the table, with its source beside it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from goldenenv.catalog import UNVERIFIED, rows

CLASSES = ("capacity", "quota", "unsupported", "price", "transient", "fatal")
SCOPES = ("placement", "zone", "market", "region", "none", "all")
"""placement: this zone with this capacity type; zone: this zone, whatever the capacity type; market: this capacity
type for the failing pool, in every zone; region: nothing in the region; none: nothing (retry in place); all:
nothing anywhere (a fatal error)."""


@dataclass(frozen=True)
class CapacityError:
    """One row: a cloud's error code, its class, what it rules out and what the user can do about it."""

    cloud: str
    code: str
    klass: str
    """capacity | quota | unsupported | price | transient | fatal"""
    scope: str
    """placement | zone | market | region | none | all (see SCOPES)"""
    meaning: str
    what_to_do: str
    source: str
    message: str = ""
    """Words the provider prints for the error where it prints no code (Google's provider: 'does not have enough
    resources available to fulfill the request'), `|` between alternatives, matched case-insensitively; "": the
    code alone."""

    @property
    def verified(self) -> bool:
        return UNVERIFIED not in self.source


@functools.cache
def _capacity_errors() -> dict[tuple[str, str], CapacityError]:
    return {
        (r["cloud"], r["code"]): CapacityError(r["cloud"], r["code"], r["class"], r["scope"], r["meaning"],
                                               r["what_to_do"], r["source"], r.get("message") or "")
        for r in rows("capacity_errors")
    }


def capacity_error(cloud: str, code: str) -> CapacityError | None:
    """The row for a cloud's error code (as the cloud spells it, case included), or None when the table has none."""
    return _capacity_errors().get((cloud, code))


def by_message(cloud: str, text: str) -> tuple[int, CapacityError] | None:
    """The first row of a cloud whose message words the text holds, and where they start; None when none does."""
    import re

    found = [(m.start(), row) for (c, _), row in _capacity_errors().items() if c == cloud and row.message
             for m in [re.search("|".join(re.escape(w.strip()) for w in row.message.split("|") if w.strip()),
                                 text, re.IGNORECASE)] if m]
    return min(found, key=lambda f: f[0]) if found else None


def capacity_errors(cloud: str) -> dict[str, CapacityError]:
    """Every row of a cloud, by code."""
    return {code: row for (c, code), row in _capacity_errors().items() if c == cloud}
