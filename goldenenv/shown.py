"""How a value the user wrote is shown in a message: as YAML spells it, clipped, never breaking the line's length.

Below spec.py (whose validators echo a value) and userfile.py (which reads the YAML files the values come from):
it imports nothing of goldenenv.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_SHOWN = 80
"""The most characters of a user's value a message echoes."""


def dotted(path: list | None) -> str:
    """A path in a YAML file as written: config.goldenenv:nodes[1].count."""
    return clip("".join(
        f"[{part}]" if isinstance(part, int) else (f".{clip(part)}" if i else clip(part))
        for i, part in enumerate(path or [])
    ), 2 * MAX_SHOWN) or "(top level)"


def clip(text: Any, limit: int = MAX_SHOWN) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def shown(value: Any) -> str:
    """A value as echoed in a message: repr, clipped; a huge integer by its size (it has no short repr)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    text = clip(repr(value))
    if isinstance(value, str) and len(value) > MAX_SHOWN:
        text += f" ({len(value):,} characters)"
    return text


def as_written(value: Any) -> str:
    """A value as YAML spells it, for a message: false, null, .inf, 'text' (clipped); a list or mapping by its
    kind."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return ".nan" if value != value else ".inf" if value > 0 else "-.inf"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return shown(value)
