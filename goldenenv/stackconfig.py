"""Stack configuration → ClusterSpec, in one place.

The only module that reads Pulumi config. Whatever is wrong comes back as a ConfigError
whose problems name the key as the user wrote it (`goldenenv:nodes.instanceType`) and say
what would be valid, with the closest valid value where there is one.
"""

from __future__ import annotations

import difflib
import re
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from goldenenv import catalog
from goldenenv.spec import ClusterSpec, ConfigError, Problem, pool_key
from goldenenv.userfile import MAX_DEPTH, MAX_SHOWN, as_written, clip, dotted, read_yaml, shown

NAMESPACE = "goldenenv"


def keys() -> list[str]:
    """Top-level config keys a stack file may set (without the namespace)."""
    return [f.alias or name for name, f in ClusterSpec.model_fields.items() if name not in _INTERNAL_FIELDS]


_INTERNAL_FIELDS = ("stack", "budget_opt_out")
"""Spec fields set by goldenenv, not written in a stack file (`budget: none` sets budgetOptOut)."""
NO_BUDGET = "none"
"""`goldenenv:budget: none`: a stack that says it runs without a budget, unlike one that forgot it."""
RDMA_KEYS = ("rdma", "efa")
"""A pool's RDMA switch, by its name and its first name (spec.NodePool.rdma)."""


def from_pulumi() -> ClusterSpec:
    """Read the running Pulumi program's config (the real CLI, or plan's mock runtime), in the place `up` is
    trying when it fails over (PLACEMENT_ENV)."""
    import os

    import pulumi
    from pulumi.runtime import config as runtime_config

    cfg = pulumi.Config(NAMESPACE)
    values: dict[str, Any] = {}
    for key in keys():
        raw = cfg.get(key)
        if raw is not None:
            values[key] = _decode(raw)
    _, unknown = namespaced(dict.fromkeys(runtime_config.CONFIG.get()))
    placement = os.environ.get(PLACEMENT_ENV)
    return load(pulumi.get_stack(), with_placement(values, json.loads(placement) if placement else None),
                extra_keys=unknown)


PLACEMENT_ENV = "GOLDENENV_PLACEMENT"
"""Where `goldenenv up` is trying to put the cluster while it fails over (JSON: {"zone": ..., "capacity": {pool:
type}}): the program builds there. Once an up succeeds, `record_placement` writes the place into the stack file,
so later runs, `pulumi up` among them, stay there."""
DEFAULT_POOL = "gpu"
"""The name of a pool whose stack file gives none (spec.NodePool.name's default)."""


def with_placement(values: Mapping[str, Any], placement: Mapping[str, Any] | None) -> dict[str, Any]:
    """Config values with the zone and the named pools' capacity types of one placement."""
    values = dict(values)
    if not placement:
        return values
    if placement.get("zone"):
        values["zone"] = placement["zone"]
    capacity = placement.get("capacity") or {}
    nodes = values.get("nodes")
    pools = [nodes] if isinstance(nodes, dict) else nodes if isinstance(nodes, list) else []
    placed = [{**pool, "capacity": capacity[_pool_name(pool)]}
              if isinstance(pool, dict) and _pool_name(pool) in capacity else pool for pool in pools]
    if capacity and pools:
        values["nodes"] = placed[0] if isinstance(nodes, dict) else placed
    return values


def _pool_name(pool: Mapping[str, Any]) -> str:
    return str(pool.get("name", DEFAULT_POOL))


def record_placement(path: Path, zone: str | None, capacity: Mapping[str, str], note: str) -> None:
    """Write the place `up` found capacity in into the stack file: `zone` and each named pool's `capacity`, keeping
    the file's comments and layout (ruamel.yaml round trip); `note` becomes the zone's line comment."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    doc = yaml.load(path.read_text(encoding="utf-8"))
    config = doc["config"]
    if zone:
        key = next((k for k in (f"{NAMESPACE}:zone", "zone") if k in config), None)
        if key is None:
            key = f"{NAMESPACE}:zone"
            after = next((k for k in (f"{NAMESPACE}:zones", "zones", f"{NAMESPACE}:region", "region") if k in config),
                         None)
            config.insert(list(config).index(after) + 1 if after else len(config), key, zone)
        config[key] = zone
        config.yaml_add_eol_comment(note, key)
    nodes_key = next((k for k in (f"{NAMESPACE}:nodes", "nodes") if k in config), None)
    nodes = config.get(nodes_key) if nodes_key else None
    for pool in [nodes] if isinstance(nodes, dict) else nodes or []:
        if isinstance(pool, dict) and _pool_name(pool) in capacity:
            pool["capacity"] = capacity[_pool_name(pool)]
    with path.open("w", encoding="utf-8") as f:
        yaml.dump(doc, f)


def _decode(raw: str) -> Any:
    """Structured config reaches the program as JSON text; plain strings stay strings."""
    if raw[:1] in "[{":
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw
    return raw


MAX_VALUE_CHARS = 1024
"""One goldenenv value (a name, an id, a CIDR, an address): longer is a mistake, and is never echoed whole."""
UNECHOED_KEYS = ("sshPublicKey",)
"""Values no message quotes, even clipped: a private key pasted there by mistake must not reach a terminal or a
log (spec.NodePool.ssh_public_key; goldenenv.sshkeys says what is wrong without the text)."""


def read_stack_file(path: Path) -> dict[str, Any]:
    """The `config:` of a Pulumi stack file, keys as written (`goldenenv:nodes`, `aws:region`)."""
    doc = read_yaml(path, str(path), "stack file") or {}
    config = doc.get("config", {}) if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ConfigError([Problem(f"{path} at config", "must be a mapping of keys to values")])
    prefixed: dict[str, Any] = {}
    for key, value in config.items():
        full = key if ":" in key else f"{NAMESPACE}:{key}"
        if full in prefixed:
            raise ConfigError([Problem(f"{path} at config.{clip(full)}",
                                       f"set twice (as {clip(key)} and {clip(full)})")])
        prefixed[full] = value
    return prefixed


def namespaced(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split a stack file's config into this project's values and its unknown keys.

    Other providers' namespaces (aws:, pulumi:, alicloud:) are theirs to judge; a namespace a
    typo away from ours is reported in full (`goldenev:budget`), since Pulumi would ignore it.
    """
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for full_key in config:
        if not isinstance(full_key, str):
            continue
        ns, _, key = full_key.partition(":")
        if ns == NAMESPACE:
            if key in keys():
                values[key] = config[full_key]
            else:
                unknown.append(key)
        elif _near_namespace(ns):
            unknown.append(full_key)
    return values, unknown


def _near_namespace(ns: str) -> bool:
    """Within two edits of `goldenenv`, case ignored: GoldenEnv, goldenev, golden-env."""
    a, b = ns.lower(), NAMESPACE
    if abs(len(a) - len(b)) > 2:
        return False
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1] <= 2


def _unknown_key(key: str) -> Problem:
    """An unknown goldenenv key, or a whole key under a misspelt namespace (`goldenev:budget`)."""
    ns, colon, rest = key.partition(":")
    if colon and _near_namespace(ns):
        close = difflib.get_close_matches(rest, keys(), n=1, cutoff=0.6) if len(rest) <= MAX_SHOWN else []
        target = rest if rest in keys() else (close[0] if close else rest)
        return Problem(clip(key), f"namespace {clip(ns)} is not goldenenv — did you mean {NAMESPACE}:{clip(target)}?")
    return Problem(f"{NAMESPACE}:{clip(key)}", "unknown key" + _suggest(key, keys()))


def load(stack: str, values: Mapping[str, Any], extra_keys: list[str] = ()) -> ClusterSpec:
    """Validate config values into a spec, or raise ConfigError naming every bad key."""
    problems = [_unknown_key(k) for k in extra_keys]
    values = {k: v for k, v in values.items() if v is not None}  # `key: null` means unset
    if values.get("budget") == NO_BUDGET:
        del values["budget"]
        values["budgetOptOut"] = True
    shape = _shape_problems(values)
    problems += shape
    problems += catalog_problems(values) + lock_problems(values)
    spec = None
    try:
        spec = ClusterSpec.model_validate({**values, "stack": stack})
    except ValidationError as e:
        problems += [_problem(err, values) for err in user_errors(e.errors(), values, ClusterSpec)]
    except (ValueError, TypeError, RecursionError, OverflowError) as e:
        problems.append(Problem(f"{NAMESPACE}:*", f"cannot be read: {clip(str(e) or type(e).__name__)}"))
    if problems:
        raise ConfigError(_deduplicated(problems, shape))
    return spec


def _deduplicated(problems: list[Problem], shape: list[Problem]) -> list[Problem]:
    """One line per finding: a value already refused for its shape is not judged again."""
    kept: list[Problem] = []
    for p in problems:
        again = p not in shape and any(p.key == q.key or p.key.startswith((q.key + ".", q.key + "[")) for q in shape)
        if p not in kept and not again:
            kept.append(p)
    return kept


def _shape_problems(values: Mapping[str, Any]) -> list[Problem]:
    """What no model should have to read: over-long text, nesting deeper than a stack file allows."""
    problems: list[Problem] = []

    def walk(node: Any, path: list) -> None:
        if len(path) > MAX_DEPTH:
            problems.append(Problem(_config_key(path[:MAX_DEPTH]), f"nested deeper than {MAX_DEPTH} levels"))
        elif path and path[-1] in UNECHOED_KEYS and isinstance(node, str):
            return  # its model judges it, length included, and never quotes it
        elif isinstance(node, str) and len(node) > MAX_VALUE_CHARS:
            problems.append(Problem(_config_key(path),
                                    f"{shown(node)} is too long; at most {MAX_VALUE_CHARS:,} characters"))
        elif isinstance(node, Mapping):
            for k, v in node.items():
                if isinstance(k, str) and len(k) > MAX_VALUE_CHARS:
                    problems.append(Problem(_config_key(path), f"key {shown(k)} is too long"))
                else:
                    walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + [i])

    walk(values, [])
    return problems


def _config_key(path: list) -> str:
    return f"{NAMESPACE}:" + dotted(path).removeprefix("(top level)")


def lock_problems(values: Mapping[str, Any]) -> list[Problem]:
    """The image lock the stack names exists under images/ (its contents are the lock's own check)."""
    from goldenenv.images.lock import lock_path, names

    image = values.get("image")
    lock = image.get("lock") if isinstance(image, dict) else None
    if not isinstance(lock, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", lock) or lock_path(lock).exists():
        return []  # a malformed name is the model's to report
    return [Problem(f"{NAMESPACE}:image.lock", f"{shown(lock)} has no lock (images/{lock}/lock.yaml)"
                    + _suggest(lock, names(), fallback_all=True))]


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
                f"{shown(name)} is not a GPU instance type goldenenv knows on {cloud}"
                + _suggest(name, known, fallback_all=True),
            ))
        elif not known[name].has_rdma and (key := next((k for k in RDMA_KEYS if pool.get(k) is True), None)):
            with_rdma = sorted(n for n, t in known.items() if t.has_rdma)
            problems.append(Problem(
                f"{at}.{key}", f"{name} has no RDMA interfaces; set {key}: false or use one of {', '.join(with_rdma)}",
            ))
    return problems


def _pool_key(values: Mapping[str, Any], index: int) -> str:
    return pool_key(index, _pool_count(values))


def _pool_count(values: Mapping[str, Any]) -> int:
    nodes = values.get("nodes")
    return len(nodes) if isinstance(nodes, list) else 1


def _problem(err: Mapping[str, Any], values: Mapping[str, Any]) -> Problem:
    path, model = user_path(err["loc"], values, ClusterSpec)
    if path[:1] == ["nodes"] and len(path) > 1 and isinstance(path[1], int) and _pool_count(values) == 1:
        del path[1]  # a single pool: no index in the key the user sees
    key = _config_key(path)
    kind = err["type"]
    if kind == "extra_forbidden":
        return Problem(key, "unknown key" + _suggest(str(path[-1]) if path else "", model_keys(model)))
    if kind == "missing":
        return Problem(key, "required, but not set")
    given = err.get("input")
    if path == ["budget"] and kind == "model_type":
        near = _suggest(given, [NO_BUDGET]) if isinstance(given, str) else ""
        return Problem(key, f"must be {NO_BUDGET} (explicitly no budget) or {expected(err, ClusterSpec)}; "
                            f"got {as_written(given)}{near}")
    if path == ["nodes"] and kind == "list_type":
        pool = expected({"type": "model_type", "loc": ("nodes", 0)}, ClusterSpec)
        return Problem(key, f"must be one node pool ({pool}) or a list of them; got {as_written(given)}")
    message = error_message(err, ClusterSpec)
    ctx = err.get("ctx") or {}
    if "expected" in ctx and isinstance(given, str):
        choices = [c.strip(" '") for c in str(ctx["expected"]).replace(" or ", ",").split(",")]
        near = _suggest(given, choices)
        message += near if "did you mean" in near else ""
    return Problem(key, message)


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
