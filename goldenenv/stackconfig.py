"""Stack configuration → ClusterSpec, in one place.

The only module that reads Pulumi config. Whatever is wrong comes back as a ConfigError
whose problems name the key as the user wrote it (`goldenenv:nodes.instanceType`) and say
what would be valid, with the closest valid value where there is one.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from goldenenv import catalog
from goldenenv.spec import ClusterSpec, ConfigError, Problem, pool_key

NAMESPACE = "goldenenv"


def keys() -> list[str]:
    """Top-level config keys a stack file may set (without the namespace)."""
    return [f.alias or name for name, f in ClusterSpec.model_fields.items() if name != "stack"]


def from_pulumi() -> ClusterSpec:
    """Read the running Pulumi program's config (the real CLI, or plan's mock runtime)."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    cfg = pulumi.Config(NAMESPACE)
    values: dict[str, Any] = {}
    for key in keys():
        raw = cfg.get(key)
        if raw is not None:
            values[key] = _decode(raw)
    prefix = NAMESPACE + ":"
    unknown = [k[len(prefix):] for k in runtime_config.CONFIG.get() if k.startswith(prefix)]
    return load(pulumi.get_stack(), values, extra_keys=[k for k in unknown if k not in keys()])


def _decode(raw: str) -> Any:
    """Structured config reaches the program as JSON text; plain strings stay strings."""
    if raw[:1] in "[{":
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def read_stack_file(path: Path) -> dict[str, Any]:
    """The `config:` of a Pulumi stack file, keys as written (`goldenenv:nodes`, `aws:region`)."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError([Problem(str(path), "no such stack file")]) from None
    except yaml.YAMLError as e:
        raise ConfigError([Problem(str(path), f"not valid YAML: {e}".splitlines()[0])]) from None
    config = doc.get("config", {}) if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ConfigError([Problem(f"{path}: config", "must be a mapping of keys to values")])
    return {(k if ":" in k else f"{NAMESPACE}:{k}"): v for k, v in config.items()}


def namespaced(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split a stack file's config into this project's values and its unknown keys."""
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for full_key, value in config.items():
        ns, _, key = full_key.partition(":")
        if ns != NAMESPACE:
            continue
        if key in keys():
            values[key] = value
        else:
            unknown.append(key)
    return values, unknown


def load(stack: str, values: Mapping[str, Any], extra_keys: list[str] = ()) -> ClusterSpec:
    """Validate config values into a spec, or raise ConfigError naming every bad key."""
    problems = [
        Problem(f"{NAMESPACE}:{k}", "unknown key" + _suggest(k, keys())) for k in extra_keys
    ]
    values = {k: v for k, v in values.items() if v is not None}  # `key: null` means unset
    problems += catalog_problems(values)
    try:
        spec = ClusterSpec.model_validate({**values, "stack": stack})
    except ValidationError as e:
        problems += [_problem(err, values) for err in e.errors()]
        spec = None
    if problems:
        raise ConfigError(problems)
    return spec


def catalog_problems(values: Mapping[str, Any]) -> list[Problem]:
    """What the catalog knows and the models cannot: instance types and their fabric.

    Reads the raw values so these problems are reported together with any shape errors.
    """
    cloud = values.get("cloud")
    known = catalog.instance_types(cloud) if isinstance(cloud, str) else {}
    pools = values.get("nodes")
    pools = [pools] if isinstance(pools, dict) else pools
    if not known or not isinstance(pools, list):
        return []
    problems = []
    for i, pool in enumerate(pools):
        name = pool.get("instanceType") if isinstance(pool, dict) else None
        if not isinstance(name, str):
            continue
        at = _pool_key(values, i)
        if name not in known:
            problems.append(Problem(
                f"{at}.instanceType",
                f"{name!r} is not a GPU instance type goldenenv knows on {cloud}"
                + _suggest(name, known, fallback_all=True),
            ))
        elif pool.get("efa") is True and not known[name].has_rdma:
            with_rdma = sorted(n for n, t in known.items() if t.has_rdma)
            problems.append(Problem(
                f"{at}.efa", f"{name} has no RDMA interfaces; set efa: false or use one of {', '.join(with_rdma)}",
            ))
    return problems


def _pool_key(values: Mapping[str, Any], index: int) -> str:
    return pool_key(index, _pool_count(values))


def _pool_count(values: Mapping[str, Any]) -> int:
    nodes = values.get("nodes")
    return len(nodes) if isinstance(nodes, list) else 1


def _problem(err: Mapping[str, Any], values: Mapping[str, Any]) -> Problem:
    loc = list(err["loc"])
    user_written = len(loc) - 1 if err["type"] == "extra_forbidden" else len(loc)
    loc = [_ALIASES.get(part, part) if i < user_written else part for i, part in enumerate(loc)]
    if loc[:1] == ["nodes"] and len(loc) > 1 and isinstance(loc[1], int) and _pool_count(values) == 1:
        del loc[1]  # a single pool: no index in the key the user sees
    key = NAMESPACE + ":" + "".join(
        f"[{part}]" if isinstance(part, int) else (f".{part}" if i else str(part))
        for i, part in enumerate(loc)
    )
    kind = err["type"]
    if kind == "extra_forbidden":
        return Problem(key, "unknown key" + _suggest(str(loc[-1]), _keys_at(err["loc"][:-1])))
    if kind == "missing":
        return Problem(key, "required, but not set")
    message = err["msg"].removeprefix("Value error, ")
    given = err.get("input")
    if isinstance(given, (str, int, float, bool)) and kind not in ("value_error",):
        message = f"{message}; got {given!r}"
    ctx = err.get("ctx") or {}
    if "expected" in ctx and isinstance(given, str):
        choices = [c.strip(" '") for c in str(ctx["expected"]).replace(" or ", ",").split(",")]
        message += _suggest(given, choices)
    return Problem(key, message)


def _field_aliases(model: type[BaseModel], seen: dict[str, str]) -> dict[str, str]:
    for name, f in model.model_fields.items():
        if f.alias and f.alias != name:
            seen[name] = f.alias
        nested = _model_in(f.annotation)
        if nested is not None and nested is not model:
            _field_aliases(nested, seen)
    return seen


def _keys_at(loc: tuple) -> list[str]:
    """Valid keys of the model that sits at `loc` inside ClusterSpec."""
    model: Any = ClusterSpec
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        model = _model_in(field.annotation) if field else None
    if model is None:
        return []
    return [f.alias or n for n, f in model.model_fields.items() if n != "stack"]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found:
                return found
    return None


def _suggest(word: str, options: Any, fallback_all: bool = False) -> str:
    options = sorted(options)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f" — did you mean {close[0]}?"
    if options and (fallback_all or len(options) <= 12):
        return f"; valid: {', '.join(options)}"
    return ""


_ALIASES = _field_aliases(ClusterSpec, {})
"""Python field name → the key users write; pydantic names a validated default by its field name."""
