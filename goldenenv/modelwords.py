"""pydantic's errors in a stack file's or a lock's words: the key as the user wrote it, what would be valid,
the closest valid value.

Shared by the stack file's reader (stackconfig.py) and the image lock's (images/lock.py), below both: the lock
must not import stackconfig, which checks that the lock a stack names exists.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from goldenenv.shown import MAX_SHOWN, as_written, clip

_INTERNAL_FIELDS = ("stack", "budget_opt_out")
"""ClusterSpec's fields that no stack file writes (the stack's name, `budget: none` read as a flag)."""


WRONG_KIND = {
    "model_type": None, "model_attributes_type": None, "dataclass_type": None,
    "dict_type": "a mapping", "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "string_type": "text", "int_type": "a whole number", "float_type": "a number", "bool_type": "true or false",
}
"""pydantic's errors for a value of the wrong kind (a list where a mapping goes), with what the kind is in a
stack file's or lock's words; None: a mapping of a model's keys (`expected`), never the model's class name."""


def _wrong_kind(err: Mapping[str, Any]) -> bool:
    """An error about the kind of value, not its content; any error naming a class (ctx class_name) is one, and so is
    a value none of a union's kinds fits (user_errors' `alternatives`)."""
    return err["type"] in WRONG_KIND or "class_name" in (err.get("ctx") or {}) or bool(err.get("alternatives"))


def error_message(err: Mapping[str, Any], model: type[BaseModel] | None = None) -> str:
    """pydantic's message with the value the user gave, clipped wherever it appears, in YAML's spelling (false,
    null). A section of the wrong kind says what it holds (`must be a mapping with bucket, parallelFs, localNvme`),
    its keys read from `model`, the root model the error's location starts at: never a model's class name."""
    given = err.get("input")
    if _wrong_kind(err) and err["type"] not in ("int_type", "float_type", "bool_type", "string_type"):
        return clip(f"must be {expected(err, model)}; got {as_written(given)}", 1000)
    if err["type"] != "value_error":
        from goldenenv import inwords

        _, _, hint, _, meta = _walk(err["loc"], None, model) if model is not None else (None, None, None, None, [])
        said = inwords.finding(err, inwords.bounds(meta), inwords.described_patterns(model) if model else {},
                               as_written(given), whole=hint is int)
        if said is not None:
            return clip(said, 1000)
    message = str(err["msg"]).removeprefix("Value error, ")
    if isinstance(given, str) and len(given) > MAX_SHOWN:
        message = message.replace(given, clip(given))
    if (given is None or isinstance(given, (str, int, float, bool))) and err["type"] != "value_error":
        message = f"{message}; got {as_written(given)}"
    return clip(message, 1000)


def expected(err: Mapping[str, Any], model: type[BaseModel] | None) -> str:
    """What a value of the wrong kind should have been, in a stack file's words: `a mapping with bucket, parallelFs,
    localNvme` (the model's keys as written, from `model` down the error's location), `a list`, `text`."""
    if err.get("alternatives"):
        return " or ".join(dict.fromkeys(expected(alt, model) for alt in err["alternatives"]))
    kind = WRONG_KIND.get(err["type"])
    if kind:
        return kind
    hint = _walk(err["loc"], None, model)[2] if model is not None else None
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return f"a mapping with {', '.join(_written_keys(hint))}"
    return "a mapping"


def _written_keys(model: type[BaseModel]) -> list[str]:
    """A model's keys as a stack file or lock writes them (camelCase aliases), in the model's order."""
    return [f.alias or n for n, f in model.model_fields.items() if n not in _INTERNAL_FIELDS]


def user_errors(errors: list[Mapping[str, Any]], data: Any, model: type[BaseModel]) -> list[dict[str, Any]]:
    """pydantic's errors as the user's findings: where a value may be one of several kinds (`hostImage`: a
    catalog name or a mapping of id and driver), pydantic reports every kind it tried. The kinds the value is not
    are dropped when one kind fits it (`hostImage: {id: 5}` is about the id, not that it is no text); when none
    fits, they become one error that names them all (`must be text or a mapping with id, driver; got 5`)."""
    tried: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for err in errors:
        for at, member in _walk(err["loc"], data, model)[3]:
            tried.setdefault(tuple(err["loc"][:at]), {}).setdefault(member, []).append(err)
    dropped: set[int] = set()
    merged: dict[int, dict[str, Any]] = {}
    for at, members in tried.items():
        def wrong_kind(errs: list[dict[str, Any]], member: str) -> bool:
            return len(errs) == 1 and _wrong_kind(errs[0]) and tuple(errs[0]["loc"]) == (*at, member)

        misses = [m for m, errs in members.items() if wrong_kind(errs, m)]
        if len(misses) < len(members):
            dropped.update(id(members[m][0]) for m in misses)
        elif misses:
            first, *rest = (members[m][0] for m in misses)
            merged[id(first)] = {**first, "loc": at, "type": "union_type", "alternatives": [first, *rest]}
            dropped.update(id(e) for e in rest)
    return [merged.get(id(e), dict(e)) for e in errors if id(e) not in dropped]


def user_path(loc: tuple, data: Any, model: type[BaseModel]) -> tuple[list[str | int], type[BaseModel] | None]:
    """The key the user wrote for a pydantic error location, and the model that holds it.

    pydantic adds its own parts to a location (`lax-or-strict[...]`, `function-plain[...]`, the
    member of a union it tried: `str`, `IPv4Network`, `HostImageOverride`, `[key]`). Walking the
    models' types beside the user's data keeps only the user's own keys and list indices.
    """
    path, holder, _, _, _ = _walk(loc, data, model)
    return path, holder


def _walk(loc: tuple, data: Any, model: type[BaseModel]) -> tuple[list[str | int], type[BaseModel] | None, Any,
                                                                 list[tuple[int, str]], list[Any]]:
    """user_path's walk: the user's key, the model holding it, the type expected at the location's end, where
    the location chose a member of a union: (its index in `loc`, the member's name), and the constraints on the
    value at the end (its field's metadata: Ge, MaxLen, a pattern)."""
    path: list[str | int] = []
    unions: list[tuple[int, str]] = []
    meta: list[Any] = []
    node, hint, holder = data, model, model
    for i, part in enumerate(loc):
        members = _members(hint)
        if len(members) > 1:
            hint = next((m for m in members if getattr(m, "__name__", None) == part), None)
            unions.append((i, part))
            continue
        hint = members[0] if members else None
        if part == "[key]":
            continue
        origin = typing.get_origin(hint)
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            holder = hint
            field = _field(hint, part)
            if isinstance(node, Mapping) and part in node:
                path.append(part)
                node = node[part]
            else:
                path.append((field[1].alias or field[0]) if field else part)
                node = None
            hint = field[1].annotation if field else None
            meta = [*field[1].metadata, *_annotated(hint)] if field else []
        elif origin in (list, tuple, set, frozenset) and isinstance(part, int):
            path.append(part)
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else node if part == 0 else None
            hint = (typing.get_args(hint) or (None,))[0]
            meta = _annotated(hint)
        elif origin in (dict, Mapping):
            path.append(part)
            node = node.get(part) if isinstance(node, Mapping) else None
            hint = (typing.get_args(hint) or (None, None))[1]
            meta = _annotated(hint)
        elif hint is None and isinstance(node, Mapping) and part in node:
            path.append(part)
            node = node[part]
        elif hint is None and isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        else:
            hint = None
    members = _members(hint)
    return path, holder, members[0] if len(members) == 1 else hint, unions, meta


def _annotated(hint: Any) -> list[Any]:
    """The constraints an Annotated type carries (a list item's `Annotated[int, Field(ge=1)]`), through Optional."""
    if typing.get_origin(hint) is typing.Annotated:
        return [m for arg in typing.get_args(hint)[1:] for m in (*getattr(arg, "metadata", ()), arg)]
    members = [a for a in typing.get_args(hint) if a is not type(None)]
    is_union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return _annotated(members[0]) if is_union and len(members) == 1 else []


def _members(hint: Any) -> list[Any]:
    """A type's alternatives, Annotated and None stripped: one for a plain type, several for a union."""
    if hint is None:
        return []
    if typing.get_origin(hint) is typing.Annotated:
        return _members(typing.get_args(hint)[0])
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return [m for arg in typing.get_args(hint) if arg is not type(None) for m in _members(arg)]
    return [hint]


def _field(model: type[BaseModel], part: Any) -> tuple[str, Any] | None:
    return next(((n, f) for n, f in model.model_fields.items() if part in (n, f.alias, *_old_names(f))), None)


def _old_names(field: Any) -> list[str]:
    """The other names a field is read under (NodePool.rdma is also read as `efa`)."""
    return [c for c in getattr(field.validation_alias, "choices", None) or [] if isinstance(c, str)]


def model_keys(model: type[BaseModel] | None) -> list[str]:
    """The keys a user may write in a model's mapping, old names included."""
    if model is None:
        return []
    keys = [f.alias or n for n, f in model.model_fields.items() if n not in _INTERNAL_FIELDS]
    return keys + [c for n, f in model.model_fields.items() for c in _old_names(f) if c not in keys]


def _suggest(word: str, options: Any, fallback_all: bool = False) -> str:
    options = sorted(options)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6) if len(word) <= MAX_SHOWN else []
    if close:
        return f" — did you mean {close[0]}?"
    if options and (fallback_all or len(options) <= 12):
        return f"; valid: {', '.join(options)}"
    return ""
