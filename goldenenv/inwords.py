"""pydantic's findings in the project's words: what is wrong with a value and what to write instead.

pydantic says `String should match pattern '^[a-z][a-z0-9-]{0,30}$'` or `Input should be greater than 0`: a
regular expression and a library's phrasing. Every message a stack file or a lock gets goes through `finding`,
which says the same in plain words, with the whole valid range where a field has two bounds. A text field's
pattern is said in words: its own (the field's `description`, for a pattern with a fixed form such as
`repo@sha256:<64 hex digits>`), else read from the pattern itself when it is a run of character classes
(`lower-case letters, digits and -, starting with a lower-case letter, at most 31 characters`).
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel

_LETTER, _NUMBER = "\U000f0000", "\U000f0001"
"""Stand-ins for the Unicode classes \\p{L} and \\p{N} (pydantic's Rust regex has them, Python's re does not)."""


def _parse(pattern: str):
    import re._parser as parser

    return parser.parse(pattern.replace(r"\p{L}", _LETTER).replace(r"\p{N}", _NUMBER))


@functools.cache
def pattern_words(pattern: str) -> str | None:
    """A pattern made of character classes in words; None when it has a fixed form (literal parts, choices) that
    only its field's description can say."""
    try:
        parsed = _parse(pattern)
    except Exception:  # noqa: BLE001 - a pattern Python cannot read is said by its description
        return None
    items = _flat(list(parsed))
    if not items:
        return None
    classes = [c for c, _ in items]
    allowed = frozenset().union(*classes)
    words = [_class_words(allowed)]
    if len(items) > 1 and classes[0] != allowed:
        words.append(f"starting with {_one_of(classes[0])}")
    if len(items) > 1 and classes[-1] != allowed and items[-1][1]:
        words.append(f"ending with {_one_of(classes[-1])}")
    low, high = parsed.getwidth()
    if high < 1 << 30:
        words.append(f"{low} to {high} characters" if low > 1 and low != high else
                     f"exactly {high} characters" if low == high else f"at most {high} characters")
    return ", ".join(words)


def allowed_characters(pattern: str) -> frozenset[str] | None:
    """Every character a class-run pattern takes (ranges as (first, last)); None for a pattern with a fixed form."""
    try:
        items = _flat(list(_parse(pattern)))
    except Exception:  # noqa: BLE001
        return None
    return frozenset().union(*(c for c, _ in items)) if items else None


def refused(text: str, pattern: str) -> list[str]:
    """The characters of `text` a class-run pattern never takes, in order, each once."""
    allowed = allowed_characters(pattern)
    if allowed is None:
        return []
    return list(dict.fromkeys(c for c in text if not _takes(allowed, c)))


def _takes(allowed: frozenset, char: str) -> bool:
    import unicodedata

    for item in allowed:
        if item == _LETTER and unicodedata.category(char).startswith("L"):
            return True
        if item == _NUMBER and unicodedata.category(char).startswith("N"):
            return True
        if item == "DIGIT" and char.isdigit() and char.isascii():
            return True
        if isinstance(item, tuple) and item[0] <= char <= item[1]:
            return True
        if item == char:
            return True
    return False


def _flat(nodes: list) -> list[tuple[frozenset, bool]] | None:
    """A pattern's items as (character class, always present), or None when it is more than classes in a row."""
    from re._constants import AT, IN, LITERAL, MAX_REPEAT, SUBPATTERN

    out: list[tuple[frozenset, bool]] = []
    for op, arg in nodes:
        if op is AT:
            continue
        if op is IN:
            out.append((_class((op, arg)), True))
        elif op is MAX_REPEAT:
            low, _, body = arg
            body = list(body)
            if len(body) == 1 and body[0][0] in (IN, LITERAL):
                out.append((_class(body[0]), low > 0))
            elif len(body) == 1 and body[0][0] is SUBPATTERN:
                inner = _flat(list(body[0][1][3]))
                if inner is None:
                    return None
                out += [(c, present and low > 0) for c, present in inner]
            else:
                return None
        elif op is SUBPATTERN:
            inner = _flat(list(arg[3]))
            if inner is None:
                return None
            out += inner
        else:
            return None  # a fixed character (sm_90, 3.11, /fsx) or a choice is a form, said by its description
    return out


def _class(node) -> frozenset:
    from re._constants import CATEGORY, CATEGORY_DIGIT, LITERAL, NEGATE, RANGE

    op, arg = node
    members: set = set()
    for kind, value in ([(LITERAL, arg)] if op is LITERAL else arg):
        if kind is LITERAL:
            members.add(chr(value))
        elif kind is RANGE:
            members.add((chr(value[0]), chr(value[1])))
        elif kind is CATEGORY and value is CATEGORY_DIGIT:
            members.add("DIGIT")
        elif kind is NEGATE:
            members.add("NOT")
        else:
            members.add(str(value))
    return frozenset(members)


_RANGE_WORDS = {("a", "z"): "lower-case letters", ("A", "Z"): "capital letters", ("0", "9"): "digits",
                ("a", "f"): "a to f", ("A", "F"): "A to F",
                "DIGIT": "digits", _LETTER: "letters", _NUMBER: "digits"}


def _class_words(members: frozenset) -> str:
    if "NOT" in members:
        return "text on one line, without control characters"
    named, marks = [], []
    lower, upper = ("a", "z") in members, ("A", "Z") in members
    for item in sorted(members, key=str):
        if lower and upper and item in (("a", "z"), ("A", "Z")):
            continue
        if item in _RANGE_WORDS:
            named.append(_RANGE_WORDS[item])
        elif isinstance(item, tuple):
            named.append(f"{item[0]} to {item[1]}")
        elif item == " ":
            named.append("spaces")
        else:
            marks.append(item)
    if lower and upper:
        named.insert(0, "letters")
    named = list(dict.fromkeys(sorted(named, key=_word_rank)))
    if marks:
        named.append(" ".join(sorted(marks)))
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


_WORD_ORDER = ("letters", "lower-case letters", "capital letters", "digits", "spaces")


def _word_rank(word: str) -> int:
    return _WORD_ORDER.index(word) if word in _WORD_ORDER else len(_WORD_ORDER)


def _one_of(members: frozenset) -> str:
    words = _class_words(members)
    singular = {"lower-case letters": "a lower-case letter", "capital letters": "a capital letter",
                "letters": "a letter", "digits": "a digit"}
    for plural, one in singular.items():
        words = re.sub(rf"\b{plural}\b", one, words)
    return words.replace(" and ", " or ")


def described_patterns(model: type[BaseModel]) -> dict[str, str]:
    """Each pattern of a model tree with its field's description: the words for a pattern with a fixed form."""
    return dict(_described(model))


@functools.cache
def _described(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for info in field_infos(model):
        pattern = next((m.pattern for m in info.metadata if getattr(m, "pattern", None)), None)
        if pattern and info.description:
            found.setdefault(pattern, info.description)
    return tuple(found.items())


def field_infos(model: type[BaseModel], seen: set | None = None) -> Iterable[Any]:
    """Every FieldInfo of a model tree: the models' fields and those inside their types (list[Annotated[...]])."""
    from pydantic.fields import FieldInfo

    seen = set() if seen is None else seen
    if model in seen:
        return
    seen.add(model)
    for info in model.model_fields.values():
        yield info
        for inner in (info.annotation, *_nested(info.annotation)):
            if isinstance(inner, FieldInfo):
                yield inner
            elif isinstance(inner, type) and issubclass(inner, BaseModel):
                yield from field_infos(inner, seen)


def _nested(annotation: Any) -> Iterable[Any]:
    for arg in typing.get_args(annotation):
        yield arg
        yield from _nested(arg)


def bounds(metadata: Iterable[Any]) -> dict[str, Any]:
    """A field's numeric and length bounds (ge, gt, le, lt, min_length, max_length) from its metadata."""
    found: dict[str, Any] = {}
    for m in metadata:
        for kind, attr in ((Ge, "ge"), (Gt, "gt"), (Le, "le"), (Lt, "lt"), (MinLen, "min_length"),
                           (MaxLen, "max_length")):
            if isinstance(m, kind):
                found[attr] = getattr(m, attr)
        for attr in ("ge", "gt", "le", "lt", "min_length", "max_length"):
            if getattr(m, attr, None) is not None and not isinstance(m, (Ge, Gt, Le, Lt, MinLen, MaxLen)):
                found[attr] = getattr(m, attr)
    return found


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def number_range(limits: Mapping[str, Any], whole: bool) -> str:
    """`a whole number from 1 to 2,048`, `a number more than 0 and at most 100,000`."""
    kind = "a whole number" if whole else "a number"
    low = ("ge", limits["ge"]) if "ge" in limits else ("gt", limits["gt"]) if "gt" in limits else None
    high = ("le", limits["le"]) if "le" in limits else ("lt", limits["lt"]) if "lt" in limits else None
    if low and high and low[0] == "ge" and high[0] == "le":
        return f"{kind} from {_number(low[1])} to {_number(high[1])}"
    said = [f"{'at least' if low[0] == 'ge' else 'more than'} {_number(low[1])}"] if low else []
    said += [f"{'at most' if high[0] == 'le' else 'less than'} {_number(high[1])}"] if high else []
    return f"{kind} " + " and ".join(said) if said else kind


def _items(n: Any) -> str:
    return f"{_number(n)} item" + ("" if n == 1 else "s")


def _chars(n: Any) -> str:
    return f"{_number(n)} character" + ("" if n == 1 else "s")


def finding(err: Mapping[str, Any], limits: Mapping[str, Any], described: Mapping[str, str],
            given_text: str, whole: bool = False) -> str | None:
    """pydantic's error `err` in plain words, or None when it is not one of the kinds said here (a message of the
    project's own, from a validator, is kept). `limits`: the field's bounds; `described`: pattern -> words;
    `given_text`: the value as the user wrote it, shortened (userfile.as_written); `whole`: the field takes whole
    numbers only."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    whole = whole or kind.startswith("int")
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        words = described.get(pattern) or pattern_words(pattern) or "a value of the form shown in the documentation"
        bad = refused(given, pattern) if isinstance(given, str) else []
        why = (f"has {' '.join(repr(c) for c in bad[:5])}, which is not allowed here" if bad
               else "is not in the form taken here")
        return f"{given_text} {why}; write {words}"
    if kind in ("string_too_long", "string_too_short"):
        most, least = limits.get("max_length"), limits.get("min_length")
        n = len(given) if isinstance(given, str) else None
        size = f" ({_chars(n)})" if n is not None and "characters)" not in given_text else ""
        if kind == "string_too_long":
            return f"{given_text} is too long{size}; write at most {_chars(ctx.get('max_length', most))}"
        return f"{given_text} is too short{size}; write at least {_chars(ctx.get('min_length', least))}"
    if kind in ("too_long", "too_short"):
        n = ctx.get("actual_length")
        has = f"has {_items(n)}" if n is not None else "has the wrong number of items"
        most, least = ctx.get("max_length", limits.get("max_length")), ctx.get("min_length", limits.get("min_length"))
        need = f"list at most {_items(most)}" if kind == "too_long" else f"list at least {_items(least)}"
        return f"{has}; {need}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"):
        return f"must be {number_range(limits or _ctx_limits(kind, ctx), whole)}; got {given_text}"
    if kind in ("int_parsing", "int_from_float", "int_type", "int_parsing_size"):
        return f"must be {number_range(limits, True)}; got {given_text}"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return f"must be {number_range(limits, False)}, written as digits (not inf or nan); got {given_text}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false; got {given_text}"
    if kind in ("literal_error", "enum"):
        choices = [c.strip(" '") for c in str(ctx.get("expected", "")).replace(" or ", ",").split(",") if c.strip()]
        return f"must be one of {', '.join(repr(c) for c in choices)}; got {given_text}"
    if kind.startswith(("ip_v4_network", "ip_v6_network", "ip_any_network")):
        import ipaddress

        try:
            network = ipaddress.ip_network(given, strict=False) if isinstance(given, str) else None
        except ValueError:
            network = None
        if network is not None:
            return f"{given_text} has host bits set; write the network's own address, {network}"
        return f"must be a network such as 10.42.0.0/16; got {given_text}"
    if kind in ("string_type", "string_unicode", "string_sub_type"):
        return f"must be text; got {given_text}"
    return None


def _ctx_limits(kind: str, ctx: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ctx.items() if k in ("ge", "gt", "le", "lt")}


PYDANTIC_WORDS = ("String should", "should match pattern", "Input should", "validation error", "pydantic",
                  "Value error", "Assertion failed", "List should", "Dictionary should", "Unable to parse")
"""Phrases of pydantic's own messages: none may reach a user (tests/unit/test_messages_voice.py)."""
