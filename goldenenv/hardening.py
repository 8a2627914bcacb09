"""Host and storage hardening shared by the clouds' judges: named reasons, and the one-day delete-everything test.

A setting may stay off only by a named reason: the resource carries the label/tag EXCEPTION_KEY whose value names a
reason in its cloud's table (goldenenv/clouds/<cloud>/hardening.py REASONS), each with its source. No reason, or a
reason the table does not know, is a finding. Lowest layer: no goldenenv import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EXCEPTION_KEY = "goldenenv-hardening-exception"
"""The label (Google Cloud) or tag (Azure) naming why a hardening setting stays off; a value both accept
(lowercase letters, digits and hyphens)."""
SHORTEST_SAFE_DAYS = 1
"""A delete-everything lifecycle rule acting at this age or sooner empties the store while a run still needs it."""


@dataclass(frozen=True)
class Reason:
    name: str
    settings: frozenset[str]
    """The settings it excuses (the resource's property names)."""
    why: str
    source: str


def excused(resource: Any, setting: str, reasons: Mapping[str, Reason], tag_input: str) -> bool:
    """Whether the resource names a known reason that excuses ``setting``."""
    tags = resource.props.get(tag_input)
    name = tags.get(EXCEPTION_KEY) if isinstance(tags, Mapping) else None
    reason = reasons.get(str(name)) if name else None
    return reason is not None and setting in reason.settings


def reason_hint(setting: str, reasons: Mapping[str, Reason]) -> str:
    known = [r.name for r in reasons.values() if setting in r.settings]
    return (f"or, where it must stay off, name why with the {EXCEPTION_KEY} label/tag"
            + (f" ({', '.join(known)})" if known else ""))


def deletes_within_a_day(days: Any) -> bool:
    return isinstance(days, (int, float)) and not isinstance(days, bool) and days <= SHORTEST_SAFE_DAYS
