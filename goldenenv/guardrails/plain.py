"""Readers of plain data as the engine gives it: booleans as strings, lists or mappings that may be absent.

Shared by the rules and by each cloud's guardrail facts (goldenenv/clouds/<cloud>/guardrail_facts.py), so a
provider's hook reads a property the way every rule does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from goldenenv.guardrails.model import PlannedResource


def _is_true(value: Any) -> bool:
    """True for a bool True or the string "true" (launch templates carry booleans as strings)."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _port(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _protocol(value: Any) -> str:
    """An IP protocol by name: "-1" (every protocol) is "all", IANA numbers name tcp, udp and icmp."""
    text = str(value).strip().lower()
    return {"-1": "all", "6": "tcp", "17": "udp", "1": "icmp"}.get(text, text)


def _sources(*values: Any) -> list[str]:
    """The non-empty CIDR strings among values that are each one CIDR or a list of them."""
    sources = []
    for value in values:
        for cidr in ([value] if isinstance(value, str) else _items(value)):
            if isinstance(cidr, str) and cidr.strip():
                sources.append(cidr.strip())
    return sources


def _label(resource: PlannedResource) -> str:
    """'Kind name' for messages, e.g. "LaunchTemplate 'gpu-nodes'"."""
    return f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}'"


def _refers_to(resource: PlannedResource, prop: str, value: Any, target: PlannedResource,
               target_values: Iterable[Any]) -> bool:
    """Whether ``value`` (read from ``resource.props[prop]``) points at ``target``, by value or by dependency."""
    if isinstance(value, str) and value in {v for v in target_values if isinstance(v, str)}:
        return True
    return target.urn in resource.property_dependencies.get(prop, ())
