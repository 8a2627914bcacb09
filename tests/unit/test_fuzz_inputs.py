"""Any bytes in a stack file: `goldenenv plan` exits 0, 1 or 2, never with a traceback (issue 8).

Documents are written as YAML text by hand, not by a YAML library, so they can hold what a
library would refuse to write and a person might still type: integers of thousands of digits,
raw bytes, control characters, anchors and aliases, nesting a thousand deep, non-text keys.

The examples per test default to a fast suite; GOLDENENV_FUZZ_EXAMPLES=10000 runs the long one
(the full command line gets a twentieth of that: planning a valid AWS stack takes ~0.3 s).
"""

from __future__ import annotations

import collections
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typer.testing import CliRunner

from goldenenv import clouds, spec, stackconfig
from goldenenv.cli import app
from goldenenv.images import lock as image_lock
from goldenenv.spec import ConfigError

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "stacks").glob("Pulumi.*.yaml"))
P5_STACK = REPO / "stacks" / "Pulumi.aws-p5-2node.yaml"
EXAMPLES = int(os.environ.get("GOLDENENV_FUZZ_EXAMPLES", "150"))
CLI_EXAMPLES = max(30, EXAMPLES // 20)
INTERNALS = ("lax-or-strict", "function-", "[lax=", "json-or-python", "constrained-str", "is-instance", "[key]")
MODEL_CLASSES = sorted({v.__name__ for module in (spec, image_lock) for v in vars(module).values()
                        if isinstance(v, type) and issubclass(v, BaseModel)})
"""Every pydantic model class of the stack spec and the lock: a message says what a section holds, never its class
(`goldenenv:storage: must be a mapping with bucket, parallelFs, localNvme; got false`, issue 21)."""
NAMES_A_CLASS = re.compile(r"\b(%s)\b" % "|".join(MODEL_CLASSES))
IN_PROSE = {"Slurm"}
"""Class names that are also words goldenenv's own messages use (the scheduler): the command line's output is
checked without them; what the spec's and the lock's validation say is checked against every class."""
NAMES_A_CLASS_IN_OUTPUT = re.compile(r"\b(%s)\b" % "|".join(n for n in MODEL_CLASSES if n not in IN_PROSE))
SETTINGS = dict(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])

OUTCOMES: collections.Counter[str] = collections.Counter()
"""Per test: how each example ended; printed at the end of the module (pytest -s) for the closing note."""


@pytest.fixture(scope="module", autouse=True)
def _report_outcomes():
    yield
    for name, count in sorted(OUTCOMES.items()):
        print(f"fuzz outcome {name}: {count}")


class Raw(str):
    """YAML text written as is: a plain scalar the generator wants verbatim (huge integers, tags, typos)."""


# --- documents ------------------------------------------------------------------------------------

_CONTROL = st.characters(min_codepoint=0, max_codepoint=0x1F) | st.sampled_from("\x7f\x85\u2028\u2029\ufeff")
_TEXT = st.text(st.characters(exclude_categories=("Cs",)) | _CONTROL, max_size=20)
_HUGE_INTS = st.integers(min_value=20, max_value=6000).map(lambda n: Raw("9" * n))
_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([Raw(".nan"), Raw("-.inf"), Raw("1e400")])
_ODD_SCALARS = st.sampled_from([
    Raw("2024-01-01"), Raw("="), Raw("~"), Raw("!!binary aGk="), Raw("!!set {a: null}"), Raw("!foo x"),
    Raw("<<: {a: 1}"), Raw("0x" + "f" * 90), Raw(":".join(["1"] + ["59"] * 60)), Raw("'"), Raw('"'), Raw("{"), Raw("]"),
    Raw("&a x"), Raw("*a"), Raw("? [a]"), Raw("- -"), Raw("none"), Raw("null"), Raw("yes"), Raw("0o17"),
])
_SCALARS = (st.none() | st.booleans() | st.integers() | _HUGE_INTS | _FLOATS | _TEXT | st.binary(max_size=8)
            | _ODD_SCALARS)
_NEAR_VALID = st.sampled_from([
    "us-east-1", "us-west-2", "p5.48xlarge", "g5.xlarge", 1, 2, 16, 1200, 4800, 125, "on-demand", "spot", True, False,
    "10.1.0.0/16", "10.0.0.0/8", "203.0.113.0/24", "/data", "a@b.co", 72, 30, "USD", Raw("none"), Raw("[]"), Raw("{}"),
])
"""Values some field accepts, so mutated stacks also reach the cloud's checks and the plan."""
_KEYS = _TEXT | st.integers() | st.none() | st.booleans() | st.sampled_from(
    stackconfig.keys() + ["instanceType", "count", "monthlyLimit", "extra", "adminCidrs", "<<"])
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)
_TOP_KEYS = (st.sampled_from(stackconfig.keys()).map(lambda k: "goldenenv:" + k)
             | st.sampled_from(["aws:region", "pulumi:tags", "alicloud:region", "goldenev:budget", "GoldenEnv:cloud",
                                "goldenenv:nope", "budget", "nodes", ":", "goldenenv:"])
             | _KEYS)


def render(value: Any) -> str:
    """Flow-style YAML for any generated value; strings double-quoted with JSON escapes (YAML accepts them)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")  # back to the same raw bytes in as_file
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(render(v) for v in value) + "]"
    return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in value.items()) + "}"


def as_file(text: str) -> bytes:
    """UTF-8, except generated bytes, which go in raw: undecodable files on purpose."""
    return text.encode("utf-8", errors="surrogateescape")


@st.composite
def nested(draw) -> str:
    """A value nested 50 to 1,500 levels deep, as flow lists, flow maps or block mappings."""
    depth = draw(st.integers(50, 1500))
    style = draw(st.sampled_from(["list", "map", "block"]))
    if style == "list":
        return "[" * depth + "]" * depth
    if style == "map":
        return "{a: " * depth + "1" + "}" * depth
    return "".join(f"\n{' ' * (i + 4)}k:" for i in range(depth)) + " x"


@st.composite
def alias_bomb(draw) -> str:
    """A billion-laughs document of 2 to 9 levels, anchored in any namespace."""
    levels, width = draw(st.integers(2, 9)), draw(st.integers(2, 9))
    ns = draw(st.sampled_from(["aws", "goldenenv", "pulumi", "x"]))
    lines = [f"  {ns}:l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"  {ns}:l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "config:\n" + "\n".join(lines) + "\n"


@st.composite
def generated_stack(draw) -> bytes:
    """A whole stack file: `config:` with generated keys and values, or something else at the top."""
    top = draw(st.sampled_from(["config", "config", "config", "other", "scalar"]))
    if top == "scalar":
        return as_file(render(draw(_VALUES)) + "\n")
    config = draw(st.dictionaries(_TOP_KEYS, _VALUES, max_size=6))
    doc = {("config" if top == "config" else draw(_KEYS)): config}
    return as_file(render(doc))[:200_000] + b"\n"


@st.composite
def mutated_shipped_stack(draw) -> bytes:
    """A shipped stack with one line's value replaced, or bytes spliced in, or a structure grafted on."""
    text = draw(st.sampled_from(SHIPPED)).read_text(encoding="utf-8")
    lines = text.splitlines()
    at = draw(st.sampled_from([i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("#")]))
    key, _, _ = lines[at].partition(":")
    kind = draw(st.sampled_from(["same", "near", "near", "value", "value", "value", "bytes", "nested", "alias",
                                 "duplicate", "truncate"]))
    if kind == "near":
        lines[at] = f"{key}: {render(draw(_NEAR_VALID))}"
    elif kind == "value":
        lines[at] = f"{key}: {render(draw(_VALUES))}"
    elif kind == "nested":
        lines[at] = f"{key}: {draw(nested())}"
    elif kind == "alias":
        lines[at] = f"{key}: &x {render(draw(_VALUES))}"
        lines.append("  aws:copy: *x")
    elif kind == "duplicate":
        lines.insert(at, lines[at])
    elif kind == "truncate":
        lines = lines[:at] + [lines[at][: draw(st.integers(0, len(lines[at])))]]
    data = as_file("\n".join(lines)) + b"\n"
    if kind == "bytes":
        where = draw(st.integers(0, len(data)))
        data = data[:where] + draw(st.binary(min_size=1, max_size=16)) + data[where:]
    return data


ANY_STACK_FILE = st.one_of(
    generated_stack(),
    mutated_shipped_stack(),
    mutated_shipped_stack(),
    st.binary(max_size=2000),
    st.binary(max_size=200).map(lambda b: b"config:\n  goldenenv:cloud: " + b),
    nested().map(lambda n: f"config:\n  goldenenv:tags: {n}\n".encode()),
    alias_bomb().map(str.encode),
    _HUGE_INTS.map(lambda n: f"config:\n  goldenenv:nodes:\n    count: {n}\n".encode()),
)


# --- properties ---------------------------------------------------------------------------------------


def assert_user_facing(error: ConfigError, path: Path) -> None:
    """Every problem one line, at a goldenenv key, at the file, or at a key under a misspelt namespace."""
    assert error.problems
    for p in error.problems:
        assert len(str(p).splitlines()) == 1, str(p)
        assert len(str(p)) < 1500, str(p)[:200]
        assert (p.key.startswith(("goldenenv:", str(path))) or "did you mean goldenenv:" in p.message), str(p)
        assert not any(part in p.key for part in INTERNALS), p.key


def assert_names_no_class(error: ConfigError) -> None:
    """No problem names a pydantic model class (`instance of Storage`): it says what the section holds."""
    for p in error.problems:
        assert not NAMES_A_CLASS.search(str(p)), str(p)


def read_and_validate(path: Path) -> str:
    """What `plan` runs before the Pulumi program: read, split namespaces, validate, ask the cloud."""
    try:
        config = stackconfig.read_stack_file(path)
        values, unknown = stackconfig.namespaced(config)
        loaded = stackconfig.load("fuzz", values, unknown)
    except ConfigError as e:
        assert_user_facing(e, path)
        assert_names_no_class(e)
        return "refused"
    try:
        clouds.validate(loaded)
    except ConfigError as e:
        assert_user_facing(e, path)
        return "refused"
    return "valid"


@pytest.fixture(scope="module")
def stack_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-stacks")


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=ANY_STACK_FILE)
def test_any_file_is_read_or_refused_in_one_line(stack_dir: Path, data: bytes) -> None:
    path = stack_dir / "Pulumi.fuzz.yaml"
    path.write_bytes(data)
    outcome = read_and_validate(path)
    event(outcome)
    OUTCOMES[f"read+validate {outcome}"] += 1


@settings(max_examples=CLI_EXAMPLES, **SETTINGS)
@given(data=st.one_of(mutated_shipped_stack(), generated_stack(), st.binary(max_size=500), alias_bomb().map(str.encode)))
def test_plan_exits_0_1_or_2_never_a_traceback(stack_dir: Path, data: bytes) -> None:
    (stack_dir / "Pulumi.cli.yaml").write_bytes(data)
    result = CliRunner().invoke(app, ["plan", "-s", "cli", "--stacks-dir", str(stack_dir)])
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert not any(part in result.output for part in INTERNALS), result.output
        assert not NAMES_A_CLASS_IN_OUTPUT.search(result.output), result.output
    event(f"exit {result.exit_code}")
    OUTCOMES[f"cli exit {result.exit_code}"] += 1


# --- locks are YAML too ---------------------------------------------------------------------------------

LOCKS = sorted((REPO / "images").glob("*/lock.yaml"))


@st.composite
def mutated_lock(draw) -> bytes:
    """A shipped lock with one line's value replaced, bytes spliced in, or an alias bomb appended."""
    lines = draw(st.sampled_from(LOCKS)).read_text(encoding="utf-8").splitlines()
    at = draw(st.sampled_from([i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("#")]))
    key, _, _ = lines[at].partition(":")
    kind = draw(st.sampled_from(["value", "value", "bytes", "nested", "bomb"]))
    if kind == "value":
        lines[at] = f"{key}: {render(draw(_VALUES | _NEAR_VALID))}"
    elif kind == "nested":
        lines[at] = f"{key}: {draw(nested())}"
    data = as_file("\n".join(lines)) + b"\n"
    if kind == "bytes":
        where = draw(st.integers(0, len(data)))
        data = data[:where] + draw(st.binary(min_size=1, max_size=16)) + data[where:]
    if kind == "bomb":
        data += draw(alias_bomb()).replace("config:\n", "x:\n").encode()
    return data


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=mutated_lock() | st.binary(max_size=500))
def test_any_lock_loads_or_is_refused_in_one_line(stack_dir: Path, data: bytes) -> None:
    (stack_dir / "fuzz").mkdir(exist_ok=True)
    (stack_dir / "fuzz" / "lock.yaml").write_bytes(data)
    try:
        image_lock.load("fuzz", stack_dir)
    except ConfigError as e:
        for p in e.problems:
            assert p.key.startswith("fuzz/lock.yaml"), str(p)
            assert len(str(p).splitlines()) == 1 and len(str(p)) < 1500, str(p)[:200]
            assert not any(part in p.key for part in INTERNALS), p.key
        assert_names_no_class(e)
        outcome = "refused"
    else:
        outcome = "loaded"
    event(outcome)
    OUTCOMES[f"lock {outcome}"] += 1


@pytest.mark.parametrize("data", [
    pytest.param(b"name: \xff\xfe\n", id="undecodable"),
    pytest.param(b"name: x\nbase: {image: " + b"[" * 1000 + b"]" * 1000 + b"}\n", id="deep"),
    pytest.param(b"name: x\npython: " + b"9" * 5000 + b"\n", id="huge-int"),
    pytest.param(b"1: 2\n", id="non-text-key"),
    pytest.param(b"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n", id="aliases"),
])
def test_hostile_lock_is_one_line_naming_the_file(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "lock.yaml").write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        image_lock.load("bad", tmp_path)
    [problem] = caught.value.problems
    assert problem.key.startswith("bad/lock.yaml"), str(problem)
    assert len(str(problem)) < 300


def test_lock_that_is_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "bad" / "lock.yaml").mkdir(parents=True)
    with pytest.raises(ConfigError) as caught:
        image_lock.load("bad", tmp_path)
    assert "directory" in str(caught.value) and "bad/lock.yaml" in str(caught.value)
