r"""Google Cloud's label rules, applied once to the stack's tags: every labelled GCP resource carries these.

Labels (SOURCE): at most 64 per resource; keys 1 to 63 characters, values 0 to 63; "Keys and values can contain
only lowercase letters, numeric characters, underscores, and dashes. All characters must use UTF-8 encoding, and
international characters are allowed"; "Keys must start with a lowercase letter or international character". The
APIs write it as keys `[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}`, values `[\p{Ll}\p{Lo}\p{N}_-]{0,63}`, and
"Keys and values must both be under 128 bytes" (BYTES_SOURCE). goldenenv's tags allow more (`goldenenv:stack`,
`cost-center`, a user's `Team`), so each is written the GCP way: lowercased (`Équipe` is the label `équipe`: a
lower-case international letter is kept), any other character mapped to `_`, cut to 63 characters and under 128
bytes. Two tags that map to the same key, or more than 64 in all, are the user's to fix: `problems` names them; the
plan names every tag that became a different label (`rewrites`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

SOURCE = "https://cloud.google.com/resource-manager/docs/labels-overview#requirements"
BYTES_SOURCE = ("https://cloud.google.com/bigtable/docs/reference/admin/rest/v2/projects.instances (labels: keys "
                "\\p{Ll}\\p{Lo}[\\p{Ll}\\p{Lo}\\p{N}_-]{0,62}, values [\\p{Ll}\\p{Lo}\\p{N}_-]{0,63}, "
                "both under 128 bytes)")
MAX_LABELS = 64
MAX_LENGTH = 63
MAX_BYTES = 127
""""Under 128 bytes" in UTF-8: 63 characters of a non-Latin script (three bytes each) would be 189."""
KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
"""The ASCII labels goldenenv writes for its own keys and names (goldenenv_stack, project): a user's tag may also
become a label with international letters (label_key)."""
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A Compute Engine resource name (RFC 1035): networks, subnets, firewalls, instances, policies."""


def takes(char: str) -> bool:
    """A character Google takes in a label: a lower-case or caseless letter (\\p{Ll}, \\p{Lo}), a number, _ or -."""
    category = unicodedata.category(char)
    return category in ("Ll", "Lo") or category.startswith("N") or char in "_-"


def starts_a_key(char: str) -> bool:
    return unicodedata.category(char) in ("Ll", "Lo")


def _label_text(text: str) -> str:
    return "".join(c if takes(c) else "_" for c in text.lower())


def _cut(text: str) -> str:
    text = text[:MAX_LENGTH]
    while len(text.encode()) > MAX_BYTES:
        text = text[:-1]
    return text


def label_key(key: str) -> str:
    text = _label_text(key)
    return _cut(text if text[:1] and starts_a_key(text[0]) else f"k{text}")


def label_value(value: str) -> str:
    return _cut(_label_text(str(value)))


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
            cut = (" (cut to 63 characters)" if len(str(value)) > MAX_LENGTH else
                   " (cut to under 128 bytes)" if len(_label_text(str(value)).encode()) > MAX_BYTES else "")
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
