"""Each cloud's tag rule as data, and the one check that applies it to a stack's tags.

A cloud's folder holds `tags.py` with RULE: a TagRule (what the cloud takes in a tag's key and in its value, with
the page that says so), or None with NO_RULE saying why nothing is judged there. `problems(rule, spec)` checks the
stack's tags, key and value apart, and names each finding at the key the user wrote (`goldenenv:tags.extra.Team`,
`goldenenv:tags.costCenter`). Where a cloud writes tags in its own form (Google's labels), the rule judges what the
tag becomes, and `rewrite` is that form.
"""

from __future__ import annotations

import importlib
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

from goldenenv.spec import STACK_TAG_KEY, ClusterSpec, Problem


@dataclass(frozen=True)
class TextRule:
    """What a cloud takes in a tag's key, or in its value."""

    max_chars: int
    min_chars: int = 0
    max_bytes: int | None = None
    """UTF-8 bytes, where the cloud counts them as well as characters."""
    letters: str = ""
    """Which letters it takes: "any" (every alphabet), "lower" (lower case and letters without case, as Google's
    \\p{Ll}\\p{Lo}), "" (no rule on letters: any character not refused)."""
    marks: str | None = None
    """The other characters taken besides letters and digits (spaces included as " "); None: any not refused."""
    refused: str = ""
    """Characters refused outright."""
    reserved_prefixes: tuple[str, ...] = ()
    """Prefixes the cloud keeps for itself, compared case-insensitively."""
    refused_parts: tuple[str, ...] = ()
    """Text refused anywhere in it (Alibaba's http://)."""
    first: str = ""
    """What the first character must be: "letter" (as `letters` says) or "" (anything taken)."""

    def takes(self, char: str) -> bool:
        if char in self.refused:
            return False
        category = unicodedata.category(char)
        if category.startswith("L"):
            return self.letters != "lower" or category in ("Ll", "Lo")
        if category.startswith("N"):
            return True
        return self.marks is None or char in self.marks

    def words(self, what: str) -> str:
        """What to write, in plain words: `what` is "a name" or "a value"."""
        said = []
        if self.marks is not None:
            letters = "lower-case letters" if self.letters == "lower" else "letters"
            marks = " ".join(c for c in self.marks if c != " ")
            said.append(f"{what} of {letters}, digits{', spaces' if ' ' in self.marks else ''}"
                        + (f" and {marks}" if marks else ""))
        elif self.refused:
            said.append(f"{what} without {' '.join(self.refused)}")
        else:
            said.append(what)
        if self.first == "letter":
            said.append("starting with a letter")
        said.append(f"at most {self.max_chars} characters")
        if self.reserved_prefixes:
            said.append(f"not starting with {' or '.join(self.reserved_prefixes)}")
        if self.refused_parts:
            said.append(f"without {' or '.join(self.refused_parts)}")
        return ", ".join(said)

    def findings(self, text: str) -> list[str]:
        """Why the cloud would refuse `text`, in words; empty when it takes it."""
        found = []
        bad = list(dict.fromkeys(c for c in text if not self.takes(c)))
        if bad:
            found.append(f"has {' '.join(repr(c) for c in bad[:5])}")
        if self.first == "letter" and text and not (self.takes(text[0]) and unicodedata.category(text[0])[0] == "L"):
            found.append(f"starts with {text[0]!r}")
        if len(text) > self.max_chars:
            found.append(f"is {len(text)} characters")
        if len(text) < self.min_chars:
            found.append("is empty")
        if self.max_bytes is not None and len(text.encode()) > self.max_bytes:
            found.append(f"is {len(text.encode())} bytes (at most {self.max_bytes})")
        prefix = next((p for p in self.reserved_prefixes if text.lower().startswith(p.lower())), None)
        if prefix:
            found.append(f"starts with {prefix}, which the cloud reserves")
        found += [f"holds {part}" for part in self.refused_parts if part in text.lower()]
        return found


@dataclass(frozen=True)
class TagRule:
    """A cloud's rule for the tags (or labels) on its resources."""

    cloud: str
    """The cloud's name in messages: AWS, Azure, Alibaba Cloud, Google Cloud."""
    what: str
    """What the cloud calls them: tag, label."""
    key: TextRule
    value: TextRule
    source: str
    """The page the rule is read from."""
    rewrite: Callable[[str, str], tuple[str, str]] | None = field(default=None, compare=False)
    """How the program writes a tag in the cloud's form (Google: a label); None: as it is."""


def rule_of(cloud: str) -> TagRule | None:
    """A cloud's TagRule, from its folder's tags.py; None where its NO_RULE says nothing is judged."""
    return importlib.import_module(f"goldenenv.clouds.{cloud}.tags").RULE


def tag_keys(spec: ClusterSpec) -> dict[str, str]:
    """Each tag the stack's resources carry, and the config key a user writes it at."""
    named = {"project": "goldenenv:tags.project", "owner": "goldenenv:tags.owner",
             "cost-center": "goldenenv:tags.costCenter", STACK_TAG_KEY: "the stack's name"}
    return {key: named.get(key, f"goldenenv:tags.extra.{key}") for key in spec.stack_tags}


def problems(rule: TagRule | None, spec: ClusterSpec) -> list[Problem]:
    """Each tag of the stack the cloud would refuse, key and value apart, named at the key the user wrote."""
    if rule is None:
        return []
    from goldenenv.userfile import clip

    found = []
    keys = tag_keys(spec)
    for key, value in spec.stack_tags.items():
        written_key, written_value = rule.rewrite(key, value) if rule.rewrite else (key, value)
        at = clip(keys[key])
        became = f" (written as the {rule.what} {clip(written_key)!r})" if written_key != key else ""
        for why in rule.key.findings(written_key):
            found.append(Problem(at, f"{rule.cloud} refuses the {rule.what} name {clip(key)!r}{became}: it {why}; "
                                     f"write {rule.key.words('a name')}"))
        for why in rule.value.findings(written_value):
            found.append(Problem(at, f"{rule.cloud} refuses the value of the {rule.what} {clip(key)!r}: it {why}; "
                                     f"write {rule.value.words('a value')}"))
    return found
