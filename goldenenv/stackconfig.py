"""Stack configuration → ClusterSpec, in one place.

The only module that reads Pulumi config. Whatever is wrong comes back as a ConfigError
whose problems name the key as the user wrote it (`goldenenv:nodes.instanceType`) and say
what would be valid, with the closest valid value where there is one.
"""

from __future__ import annotations

import difflib
import re
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from goldenenv import catalog
from goldenenv.modelwords import (_INTERNAL_FIELDS, _suggest, error_message, expected, model_keys, user_errors,
                                  user_path)
from goldenenv.spec import ClusterSpec, ConfigError, Problem, pool_key
from goldenenv.shown import MAX_SHOWN, as_written, clip, dotted, shown
from goldenenv.userfile import MAX_DEPTH, read_yaml

NAMESPACE = "goldenenv"


def keys() -> list[str]:
    """Top-level config keys a stack file may set (without the namespace)."""
    return [f.alias or name for name, f in ClusterSpec.model_fields.items() if name not in _INTERNAL_FIELDS]


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
    problems += catalog_problems(values) + lock_problems(values) + team_problems(values)
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


def team_problems(values: Mapping[str, Any]) -> list[Problem]:
    """Members named as the image's own user (the lock's `user:`, trainer in every shipped lock): the container has
    that user already, with another uid, so the member could not be made. The model cannot see the lock."""
    from goldenenv.images.lock import load as load_lock

    team, image = values.get("team"), values.get("image")
    lock = image.get("lock") if isinstance(image, dict) else None
    if not isinstance(team, list) or not team or not isinstance(lock, str):
        return []
    try:
        user = load_lock(lock).user
    except ConfigError:
        return []  # a lock that is missing or broken is reported as such
    return [Problem(f"{NAMESPACE}:team[{i}].name", f"'{user}' is the golden image's own user (images/{lock}/lock.yaml "
                    "user:), which runs the image's services; pick another name")
            for i, member in enumerate(team) if isinstance(member, dict) and member.get("name") == user]


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
    path += list(getattr((err.get("ctx") or {}).get("error"), "at", ()))  # spec.KeyedError: a key inside the value
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
    if path == ["team"] and kind == "list_type":
        member = expected({"type": "model_type", "loc": ("team", 0)}, ClusterSpec)
        return Problem(key, f"must be a list of members, each {member}; got {as_written(given)}")
    message = error_message(err, ClusterSpec)
    ctx = err.get("ctx") or {}
    if "expected" in ctx and isinstance(given, str):
        choices = [c.strip(" '") for c in str(ctx["expected"]).replace(" or ", ",").split(",")]
        near = _suggest(given, choices)
        message += near if "did you mean" in near else ""
    return Problem(key, message)
