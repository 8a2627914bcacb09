"""Google Cloud's label rules, applied once to the stack's tags: every labelled GCP resource carries these.

Labels (https://cloud.google.com/resource-manager/docs/labels-overview): at most 64 per resource; keys 1 to 63
characters, values 0 to 63; only lowercase letters, digits, `_` and `-`; a key starts with a lowercase letter.
goldenenv's tags allow more (`goldenenv:stack`, `cost-center`, a user's `Team`), so each is written the GCP way:
lowercased, any other character mapped to `_`, cut to 63 characters. Two tags that map to the same key, or more
than 64 in all, are the user's to fix: `problems` names them.
"""

from __future__ import annotations

import hashlib
import re

MAX_LABELS = 64
MAX_LENGTH = 63
_OTHER = re.compile(r"[^a-z0-9_-]")
KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A Compute Engine resource name (RFC 1035): networks, subnets, firewalls, instances, policies."""


def label_key(key: str) -> str:
    text = _OTHER.sub("_", key.lower())[:MAX_LENGTH]
    return text if text[:1].isalpha() else f"k{text}"[:MAX_LENGTH]


def label_value(value: str) -> str:
    return _OTHER.sub("_", str(value).lower())[:MAX_LENGTH]


def labels(tags: dict[str, str]) -> dict[str, str]:
    """The stack's tags as GCP labels (goldenenv:stack -> goldenenv_stack, cost-center stays)."""
    return {label_key(k): label_value(v) for k, v in tags.items()}


def rewrites(tags: dict[str, str], expected: frozenset[str] = frozenset()) -> list[str]:
    """Each tag that is a different label on Google Cloud, and the label it becomes ("key 'Équipe' -> 'k_quipe'",
    a value cut to 63 characters): a cost report grouped by the tag finds it under the label's name. `expected`:
    keys whose rewriting is goldenenv's own and documented (goldenenv:stack -> goldenenv_stack), not said."""
    found = []
    for key, value in tags.items():
        new_key, new_value = label_key(key), label_value(value)
        if new_key != key and key not in expected:
            found.append(f"key {key!r} -> {new_key!r}")
        if new_value != str(value):
            cut = " (cut to 63 characters)" if len(str(value)) > MAX_LENGTH else ""
            found.append(f"{key!r}'s value {str(value)!r} -> {new_value!r}{cut}")
    return found


def problems(tags: dict[str, str]) -> list[str]:
    """Why these tags cannot all be labels: two keys that become one, or more than GCP takes on a resource."""
    found, seen = [], {}
    for key in tags:
        other = seen.setdefault(label_key(key), key)
        if other != key:
            found.append(f"tags {other!r} and {key!r} are both the label {label_key(key)!r} on Google Cloud "
                         "(lowercase letters, digits, '_' and '-' only): rename one")
    if len(tags) > MAX_LABELS:
        found.append(f"{len(tags)} tags; a Google Cloud resource takes at most {MAX_LABELS} labels")
    return found


def resource_name(*parts: str, limit: int = MAX_LENGTH) -> str:
    """A Compute Engine name from its parts (goldenenv-<project>-<stack>-<what>): lowercase, '-' for anything
    else, starting with a letter; shortened with a hash of the whole so two stacks never share one."""
    text = re.sub(r"[^a-z0-9-]+", "-", "-".join(p for p in parts if p).lower()).strip("-")
    text = re.sub(r"-{2,}", "-", text)
    if not text[:1].isalpha():
        text = f"g-{text}"
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:limit - 9].rstrip('-')}-{digest}"
