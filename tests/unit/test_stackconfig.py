"""Bad stack config: one clear line per problem, at the key the user wrote, with what to write instead.

Never a traceback and never a half-planned cluster: `plan_config` returns a Plan or raises ConfigError.
Valid names come from the catalog and the cloud registry, never from this file.
"""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from goldenenv import catalog, clouds, stackconfig
from goldenenv.cli import app
from goldenenv.plan import Plan, plan_config
from goldenenv.spec import ConfigError, Problem

REPO = Path(__file__).resolve().parents[2]
P5_STACK = REPO / "stacks" / "Pulumi.aws-p5-2node.yaml"
NS = "goldenenv:"


@functools.cache
def _p5_config() -> dict[str, Any]:
    return stackconfig.read_stack_file(P5_STACK)


def p5_config() -> dict[str, Any]:
    """A valid stack's config, keys as written (`goldenenv:nodes`), safe to change."""
    return copy.deepcopy(_p5_config())


def rdma_type() -> str:
    return next(name for name, it in sorted(catalog.instance_types("aws").items()) if it.has_rdma)


def no_rdma_type() -> str:
    return next(name for name, it in sorted(catalog.instance_types("aws").items()) if it.rdma == "none")


def typo_of_p5() -> tuple[str, str]:
    """A real catalog name and the truncation a user might type for it."""
    real = "p5.48xlarge"
    assert real in catalog.instance_types("aws"), "the catalog no longer lists p5.48xlarge; pick another real type"
    return real, real.removesuffix("arge")


def load_errors(config: dict[str, Any]) -> ConfigError:
    values, unknown = stackconfig.namespaced(config)
    with pytest.raises(ConfigError) as caught:
        stackconfig.load("test", values, unknown)
    return caught.value


def plan_errors(config: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        plan_config("test", config)
    return caught.value


def problem_at(error: ConfigError, key: str) -> Problem:
    found = [p for p in error.problems if p.key == key]
    assert len(found) == 1, f"expected one problem at {key}, got: {[str(p) for p in error.problems]}"
    return found[0]


def assert_readable(error: ConfigError) -> None:
    """What the CLI prints: every problem on one line, starting with a goldenenv: key."""
    assert error.problems
    for p in error.problems:
        line = str(p)
        assert len(line.splitlines()) == 1, f"problem spans lines: {line!r}"
        assert line.startswith(p.key + ": ")
        assert p.key.startswith(NS), f"key not in the user's namespace: {p.key!r}"


# --- the fast path: stackconfig.load -------------------------------------------------------------


def test_valid_stack_loads() -> None:
    values, unknown = stackconfig.namespaced(p5_config())
    spec = stackconfig.load("test", values, unknown)
    assert unknown == []
    assert spec.nodes[0].instance_type in catalog.instance_types(spec.cloud)


def test_unknown_instance_type_suggests_the_closest_catalog_name() -> None:
    real, typo = typo_of_p5()
    config = p5_config()
    config["goldenenv:nodes"]["instanceType"] = typo
    error = load_errors(config)
    problem = problem_at(error, "goldenenv:nodes.instanceType")
    assert f"did you mean {real}?" in problem.message
    assert repr(typo) in problem.message or f"'{typo}'" in problem.message
    assert_readable(error)


def test_instance_type_far_from_any_lists_the_valid_ones() -> None:
    config = p5_config()
    config["goldenenv:nodes"]["instanceType"] = "zz9"
    problem = problem_at(load_errors(config), "goldenenv:nodes.instanceType")
    assert "did you mean" not in problem.message
    for name in catalog.instance_types("aws"):
        assert name in problem.message


def test_efa_on_a_type_without_rdma_names_efa_and_offers_types_with_it() -> None:
    config = p5_config()
    config["goldenenv:nodes"].update(instanceType=no_rdma_type(), efa=True)
    error = load_errors(config)
    problem = problem_at(error, "goldenenv:nodes.efa")
    assert no_rdma_type() in problem.message
    assert rdma_type() in problem.message
    assert "efa: false" in problem.message
    assert_readable(error)


def test_efa_left_unset_on_a_type_without_rdma_is_fine() -> None:
    config = p5_config()
    config["goldenenv:nodes"]["instanceType"] = no_rdma_type()
    del config["goldenenv:nodes"]["efa"]
    values, unknown = stackconfig.namespaced(config)
    assert stackconfig.load("test", values, unknown).nodes[0].rdma is None


def test_zero_nodes_is_refused_at_count() -> None:
    config = p5_config()
    config["goldenenv:nodes"]["count"] = 0
    error = load_errors(config)
    problem = problem_at(error, "goldenenv:nodes.count")
    assert "got 0" in problem.message
    assert_readable(error)


def test_spot_with_a_capacity_reservation_names_the_reservation_id() -> None:
    config = p5_config()
    config["goldenenv:nodes"].update(capacity="spot", capacityReservationId="cr-0123456789abcdef0")
    error = load_errors(config)
    problem = problem_at(error, "goldenenv:nodes.capacityReservationId")
    assert "spot" in problem.message and "drop the id" in problem.message
    assert_readable(error)


def test_misspelt_capacity_suggests_the_enum_value() -> None:
    config = p5_config()
    config["goldenenv:nodes"]["capacity"] = "spto"
    problem = problem_at(load_errors(config), "goldenenv:nodes.capacity")
    assert "did you mean spot?" in problem.message


def _set(path: tuple, value: Any):
    def change(config: dict[str, Any]) -> None:
        *parents, last = path
        target = config
        for step in parents:
            target = target[step]
        target[last] = value
    return change


def _rename(path: tuple, new: str):
    def change(config: dict[str, Any]) -> None:
        *parents, last = path
        target = config
        for step in parents:
            target = target[step]
        target[new] = target.pop(last)
    return change


WRONG = [
    pytest.param(_set(("goldenenv:nodes", "count"), "two"), "goldenenv:nodes.count", "'two'", id="count-text"),
    pytest.param(_set(("goldenenv:nodes",), "abc"), "goldenenv:nodes", "'abc'", id="nodes-text"),
    pytest.param(_set(("goldenenv:tags",), 5), "goldenenv:tags", "got 5", id="tags-number"),
    pytest.param(_set(("goldenenv:budget", "monthlyLimit"), "lots"), "goldenenv:budget.monthlyLimit", "'lots'",
                 id="budget-text"),
    pytest.param(_set(("goldenenv:network", "adminCidrs"), ["0.0.0.0/0"]), "goldenenv:network.adminCidrs",
                 "whole internet", id="ssh-to-the-world"),
    pytest.param(_rename(("goldenenv:nodes", "instanceType"), "instancetype"), "goldenenv:nodes.instancetype",
                 "did you mean instanceType?", id="nested-key-case"),
    pytest.param(_rename(("goldenenv:region",), "goldenenv:regoin"), "goldenenv:regoin",
                 "did you mean region?", id="top-level-key-typo"),
    pytest.param(_rename(("goldenenv:storage", "parallelFs"), "parallelFS"), "goldenenv:storage.parallelFS",
                 "did you mean parallelFs?", id="deep-key-case"),
    pytest.param(_set(("goldenenv:network", "cidr"), "8.8.0.0/16"), "goldenenv:network.cidr", "private",
                 id="public-cidr"),
    pytest.param(_set(("goldenenv:zone",), "eu-west-1a"), "goldenenv:zone", "us-east-1a", id="zone-elsewhere"),
    pytest.param(_set(("goldenenv:budget", "emails"), []), "goldenenv:budget.emails", "at least 1",
                 id="no-budget-email"),
]


@pytest.mark.parametrize(("change", "key", "says"), WRONG)
def test_wrong_value_names_its_key(change, key: str, says: str) -> None:
    config = p5_config()
    change(config)
    error = load_errors(config)
    assert says in problem_at(error, key).message
    assert_readable(error)


def test_renamed_required_key_also_says_the_real_one_is_missing() -> None:
    config = p5_config()
    _rename(("goldenenv:nodes", "instanceType"), "instancetype")(config)
    assert "required" in problem_at(load_errors(config), "goldenenv:nodes.instanceType").message


def test_every_bad_key_is_reported_at_once() -> None:
    config = p5_config()
    config["goldenenv:nodes"]["count"] = 0
    config["goldenenv:tags"] = 5
    _rename(("goldenenv:region",), "goldenenv:regoin")(config)
    keys = {p.key for p in load_errors(config).problems}
    assert {"goldenenv:nodes.count", "goldenenv:tags", "goldenenv:regoin", "goldenenv:region"} <= keys


def test_other_namespaces_are_not_ours_to_judge() -> None:
    config = p5_config()
    config["aws:region"] = "us-east-1"
    config["aws:profile"] = 5
    values, unknown = stackconfig.namespaced(config)
    assert unknown == []
    stackconfig.load("test", values, unknown)


# --- pools -------------------------------------------------------------------------------------


def two_pools(second: dict[str, Any]) -> dict[str, Any]:
    config = p5_config()
    first = config["goldenenv:nodes"]
    config["goldenenv:nodes"] = [{**first, "name": "train"}, {**first, "name": "eval", **second}]
    return config


def test_bad_second_pool_is_named_by_index() -> None:
    real, typo = typo_of_p5()
    error = load_errors(two_pools({"instanceType": typo}))
    problem = problem_at(error, "goldenenv:nodes[1].instanceType")
    assert f"did you mean {real}?" in problem.message
    assert [p.key for p in error.problems] == ["goldenenv:nodes[1].instanceType"]
    assert_readable(error)


def test_second_pool_model_errors_are_named_by_index() -> None:
    error = load_errors(two_pools({"count": 0, "efaa": True}))
    problem_at(error, "goldenenv:nodes[1].count")
    assert "did you mean efa?" in problem_at(error, "goldenenv:nodes[1].efaa").message


def test_second_pool_efa_without_rdma_is_named_by_index() -> None:
    problem_at(load_errors(two_pools({"instanceType": no_rdma_type(), "efa": True})), "goldenenv:nodes[1].efa")


def test_pools_with_the_same_name_are_refused() -> None:
    config = p5_config()
    config["goldenenv:nodes"] = [config["goldenenv:nodes"], config["goldenenv:nodes"]]
    assert "name" in problem_at(load_errors(config), "goldenenv:nodes").message


# --- the cloud's own checks: clouds.validate and plan_config -------------------------------------


def test_unknown_cloud_suggests_a_registered_one() -> None:
    config = p5_config()
    config["goldenenv:cloud"] = "aws2"
    values, unknown = stackconfig.namespaced(config)
    spec = stackconfig.load("test", values, unknown)
    with pytest.raises(ConfigError) as caught:
        clouds.validate(spec)
    problem = problem_at(caught.value, "goldenenv:cloud")
    assert "did you mean aws?" in problem.message
    assert "aws" in clouds.names()


def test_unknown_cloud_stops_the_plan_before_any_resource() -> None:
    config = p5_config()
    config["goldenenv:cloud"] = "aws2"
    error = plan_errors(config)
    assert "did you mean aws?" in problem_at(error, "goldenenv:cloud").message
    assert_readable(error)


def test_budget_in_euros_on_aws_names_the_currency() -> None:
    config = p5_config()
    config["goldenenv:budget"]["currency"] = "EUR"
    error = plan_errors(config)
    problem = problem_at(error, "goldenenv:budget.currency")
    assert "USD" in problem.message and "EUR" in problem.message
    assert_readable(error)


def test_region_that_is_not_an_aws_region_is_named() -> None:
    config = p5_config()
    config["goldenenv:region"] = "us-east"
    del config["goldenenv:zone"]
    assert "us-east-1" in problem_at(plan_errors(config), "goldenenv:region").message


def test_plan_refuses_what_load_refuses() -> None:
    real, typo = typo_of_p5()
    config = p5_config()
    config["goldenenv:nodes"]["instanceType"] = typo
    assert f"did you mean {real}?" in problem_at(plan_errors(config), "goldenenv:nodes.instanceType").message


def test_valid_stack_plans() -> None:
    result = plan_config("test", p5_config())
    assert isinstance(result, Plan)
    assert result.resources


# --- once bugs: each case below failed before its fix ---------------------------------------------


def test_capacity_reservation_without_an_id_asks_for_one() -> None:
    config = p5_config()
    config["goldenenv:nodes"]["capacity"] = "capacity-reservation"
    problem = problem_at(load_errors(config), "goldenenv:nodes.capacityReservationId")
    assert "cr-" in problem.message


@pytest.mark.parametrize(("change", "key"), [
    pytest.param(_set(("goldenenv:nodes", "instanceType"), "p5\n48xlarge"), "goldenenv:nodes.instanceType",
                 id="instance-type"),
    pytest.param(_set(("goldenenv:zone",), "us-east-1a\nb"), "goldenenv:zone", id="zone"),
    pytest.param(_set(("goldenenv:cloud",), "aw\ns"), "goldenenv:cloud", id="cloud"),
    pytest.param(_set(("goldenenv:region",), "us\neast-1"), "goldenenv:region", id="region"),
    pytest.param(_set(("goldenenv:tags", "extra"), {"aws:a\nb": "v"}), "goldenenv:tags.extra", id="tag-key"),
    pytest.param(_set(("goldenenv:nodes", "a\nb"), 1), "goldenenv:nodes.a\nb", id="unknown-key"),
])
def test_text_with_a_newline_still_gives_one_line(change, key: str) -> None:
    config = p5_config()
    del config["goldenenv:zone"]
    change(config)
    error = plan_errors(config)
    assert any(p.key.startswith(key.split("\n")[0]) for p in error.problems)
    assert_readable(error)


@pytest.mark.parametrize("key", ["goldenenv:zone", "goldenenv:budget"])
def test_null_optional_value_means_unset_in_the_plan_too(key: str) -> None:
    config = p5_config()
    config[key] = None
    values, unknown = stackconfig.namespaced(config)
    stackconfig.load("test", values, unknown)  # the fast path accepts null
    plan_config("test", config)


def test_infinite_budget_is_refused() -> None:
    config = p5_config()
    config["goldenenv:budget"]["monthlyLimit"] = math.inf
    problem_at(load_errors(config), "goldenenv:budget.monthlyLimit")


# --- fuzz: any one change to a valid stack gives a Plan or a readable ConfigError ----------------

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_NEAR_VALID = st.deferred(lambda: st.sampled_from([
    "", "aws", "spot", "on-demand", "capacity-reservation", "cr-0123456789abcdef0", "USD", "EUR",
    "0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/24", "::/0", "us-east-1", "us-east-1b", "/data", "a@b.co", "[1]", "{}",
    "null", "true", "1200", *sorted(catalog.instance_types("aws")),
]))
"""Values a field might accept, so changes also reach the checks behind the type checks."""
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT | _NEAR_VALID
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT | _NEAR_VALID, inner, max_size=3),
    max_leaves=8,
)


def _paths(node: Any, at: tuple = ()) -> list[tuple]:
    """Every place in the config's goldenenv values: dict keys and list items, outermost first."""
    found = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for step, child in items:
        if not at and not str(step).startswith(NS):
            continue
        found.append(at + (step,))
        found.extend(_paths(child, at + (step,)))
    return found


@st.composite
def one_change(draw) -> dict[str, Any]:
    config = p5_config()
    path = draw(st.sampled_from(_paths(config)))
    *parents, last = path
    target = config
    for step in parents:
        target = target[step]
    action = draw(st.sampled_from(["replace", "delete", "add-key"]))
    if action == "replace":
        target[last] = draw(_JSON)
    elif action == "delete":
        del target[last]
    elif isinstance(target[last], dict):
        target[last][draw(_TEXT | _NEAR_VALID)] = draw(_JSON)
    else:
        target[last] = draw(_JSON)
    return config


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_change())
def test_any_single_change_plans_or_explains_itself(config: dict[str, Any]) -> None:
    try:
        result = plan_config("fuzz", config)
    except ConfigError as e:
        event("refused")
        assert_readable(e)
    else:
        event("planned")
        assert isinstance(result, Plan)


# --- the command line ---------------------------------------------------------------------------


def run_plan(stacks_dir: Path, stack: str = "bad"):
    return CliRunner().invoke(app, ["plan", "-s", stack, "--stacks-dir", str(stacks_dir)])


def test_cli_names_the_key_and_the_suggestion(tmp_path: Path) -> None:
    real, typo = typo_of_p5()
    text = P5_STACK.read_text(encoding="utf-8").replace(f"instanceType: {real}", f"instanceType: {typo}")
    assert typo in text
    (tmp_path / "Pulumi.bad.yaml").write_text(text, encoding="utf-8")
    result = run_plan(tmp_path)
    assert result.exit_code == 2, result.output
    assert "goldenenv:nodes.instanceType" in result.output
    assert f"did you mean {real}?" in result.output
    assert "Traceback" not in result.output


def test_cli_missing_stack_file_names_it(tmp_path: Path) -> None:
    result = run_plan(tmp_path, "nope")
    assert result.exit_code == 2, result.output
    assert "Pulumi.nope.yaml" in result.output
    assert "no such stack file" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("text", [
    pytest.param("config:\n  goldenenv:cloud: [aws\n", id="unclosed-list"),
    pytest.param("config: {goldenenv:cloud: aws\n  : :\n", id="broken-mapping"),
    pytest.param("\tconfig:\n", id="tab-indent"),
])
def test_cli_stack_file_that_is_not_yaml(tmp_path: Path, text: str) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_text(text, encoding="utf-8")
    result = run_plan(tmp_path)
    assert result.exit_code == 2, result.output
    assert "Pulumi.bad.yaml" in result.output and "YAML" in result.output
    assert "Traceback" not in result.output


def test_cli_config_that_is_not_a_mapping(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_text("config: 5\n", encoding="utf-8")
    result = run_plan(tmp_path)
    assert result.exit_code == 2, result.output
    assert "mapping" in result.output


# --- hostile stack files (issue 8): exit 2, one line naming the file and the key, never a traceback ---


def plan_file(tmp_path: Path, content: bytes | str):
    """`goldenenv plan` on a stack file holding exactly these bytes."""
    data = content.encode() if isinstance(content, str) else content
    (tmp_path / "Pulumi.bad.yaml").write_bytes(data)
    return run_plan(tmp_path)


def assert_refused(result, *named: str) -> list[str]:
    """Exit 2 through SystemExit, no traceback; the lines that name every one of `named`."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines()
             if all(n in line for n in named) and not line.startswith("invalid stack configuration")]
    assert lines, f"no line names {named}: {result.output}"
    return lines


def p5_with(line: str, replacing: str) -> str:
    text = P5_STACK.read_text(encoding="utf-8")
    assert replacing in text
    return text.replace(replacing, line)


def test_cli_non_text_key(tmp_path: Path) -> None:
    [line] = assert_refused(plan_file(tmp_path, "config: {1: 2}\n"), "Pulumi.bad.yaml", "config")
    assert "key 1 is not text" in line


def test_cli_undecodable_bytes(tmp_path: Path) -> None:
    [line] = assert_refused(plan_file(tmp_path, b"config:\n  goldenenv:cloud: \xff\xfe"),
                            "Pulumi.bad.yaml", "goldenenv:cloud")
    assert "UTF-8" in line and "0xff" in line


@pytest.mark.parametrize("nested", [
    pytest.param("[" * 1000 + "]" * 1000, id="flow-lists"),
    pytest.param("{a: " * 1000 + "1" + "}" * 1000, id="flow-maps"),
    pytest.param("".join(f"\n{'  ' * (i + 2)}- " for i in range(1000)) + "x", id="block-lists"),
    pytest.param("".join(f"\n{' ' * (i + 4)}k:" for i in range(1000)) + " x", id="block-maps"),
])
def test_cli_thousand_levels_of_nesting(tmp_path: Path, nested: str) -> None:
    [line] = assert_refused(plan_file(tmp_path, f"config:\n  goldenenv:tags: {nested}\n"),
                            "Pulumi.bad.yaml", "goldenenv:tags")
    assert "nest" in line
    assert len(line) < 400


def test_cli_five_thousand_digit_integer(tmp_path: Path) -> None:
    text = p5_with(f"count: {'9' * 5000}", "count: 2")
    [line] = assert_refused(plan_file(tmp_path, text), "Pulumi.bad.yaml", "goldenenv:nodes.count")
    assert "5,000 digits" in line
    assert "9" * 100 not in line


def test_cli_directory_instead_of_a_stack_file(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.bad.yaml").mkdir()
    [line] = assert_refused(run_plan(tmp_path), "Pulumi.bad.yaml")
    assert "directory" in line


BILLION_LAUGHS = "\n".join(
    ['config:', '  aws:a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f'  aws:{b}: &{b} [{",".join(["*" + a] * 9)}]' for a, b in zip("abcdefgh", "bcdefghi")]
) + "\n"
"""The classic: nine levels of nine aliases, a 1 KB file that expands to 9^9 strings; outside our namespace."""


def test_cli_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    import time

    assert len(BILLION_LAUGHS) < 1100
    started = time.monotonic()
    [line] = assert_refused(plan_file(tmp_path, BILLION_LAUGHS), "Pulumi.bad.yaml", "aws:a")
    assert time.monotonic() - started < 1.0
    assert "anchors and aliases are not allowed in stack files" in line


def test_cli_anchor_inside_our_namespace_is_refused(tmp_path: Path) -> None:
    text = p5_with("tags: &t\n    project: llm-pretrain", "tags:\n    project: llm-pretrain")
    assert_refused(plan_file(tmp_path, text), "Pulumi.bad.yaml", "goldenenv:tags", "anchors and aliases")


def test_cli_megabyte_value_is_truncated(tmp_path: Path) -> None:
    huge = "a" * 1_000_000
    result = plan_file(tmp_path, p5_with(f"goldenenv:zone: {huge}", "goldenenv:zone: us-east-1a"))
    [line] = assert_refused(result, "Pulumi.bad.yaml", "goldenenv:zone")
    assert "1,000,000 characters" in line
    assert len(result.output) < 1000


def test_cli_long_value_under_the_file_cap_is_truncated_too(tmp_path: Path) -> None:
    result = plan_file(tmp_path, p5_with(f"goldenenv:zone: us-east-1{'a' * 5000}", "goldenenv:zone: us-east-1a"))
    [line] = assert_refused(result, "goldenenv:zone")
    assert "5,009 characters" in line and "…" in line
    assert len(result.output) < 1000


def test_cli_misspelt_namespace_says_did_you_mean(tmp_path: Path) -> None:
    result = plan_file(tmp_path, p5_with("goldenev:budget:", "goldenenv:budget:"))
    [line] = assert_refused(result, "goldenev:budget")
    assert "did you mean goldenenv:budget?" in line


@pytest.mark.parametrize("namespace", ["GoldenEnv", "golden-env", "goldenevn"])
def test_namespaces_near_ours_are_errors(namespace: str) -> None:
    config = p5_config()
    config[f"{namespace}:region"] = config.pop("goldenenv:region")
    error = load_errors(config)
    assert "did you mean goldenenv:region?" in problem_at(error, f"{namespace}:region").message


@pytest.mark.parametrize("namespace", ["aws", "pulumi", "alicloud", "gcp", "azure-native", "kubernetes"])
def test_other_providers_namespaces_stay_theirs(namespace: str) -> None:
    config = p5_config()
    config[f"{namespace}:region"] = "anything"
    values, unknown = stackconfig.namespaced(config)
    assert unknown == []
    stackconfig.load("test", values, unknown)


def test_budget_none_is_an_explicit_opt_out(tmp_path: Path) -> None:
    config = p5_config()
    config["goldenenv:budget"] = "none"
    values, unknown = stackconfig.namespaced(config)
    spec = stackconfig.load("test", values, unknown)
    assert spec.budget is None and spec.budget_opt_out is True
    unset = p5_config()
    del unset["goldenenv:budget"]
    assert stackconfig.load("test", *stackconfig.namespaced(unset)).budget_opt_out is False
    result = plan_file(tmp_path, p5_with("goldenenv:budget: none\n  goldenenv:old:", "goldenenv:budget:"))
    assert "budget" not in "".join(l for l in result.output.splitlines() if "goldenenv:budget" in l)


def test_budget_other_text_says_none_is_the_word() -> None:
    config = p5_config()
    config["goldenenv:budget"] = "nope"
    assert "none" in problem_at(load_errors(config), "goldenenv:budget").message


INTERNALS = ("lax-or-strict", "function-", "[lax=", "json-or-python", "constrained-str", "HostImageOverride", "[key]")


@pytest.mark.parametrize(("change", "key"), [
    pytest.param(_set(("goldenenv:network", "adminCidrs"), ["not-a-cidr"]), "goldenenv:network.adminCidrs",
                 id="admin-cidr"),
    pytest.param(_set(("goldenenv:nodes", "hostImage"), {"id": 5}), "goldenenv:nodes.hostImage.id", id="host-image"),
    pytest.param(_set(("goldenenv:tags", "extra"), {"": "v"}), "goldenenv:tags.extra", id="tag-key"),
])
def test_error_keys_are_the_users_keys(change, key: str) -> None:
    config = p5_config()
    change(config)
    error = load_errors(config)
    assert any(p.key.startswith(key) for p in error.problems), [str(p) for p in error.problems]
    for p in error.problems:
        assert not any(part in p.key for part in INTERNALS), p.key
    assert_readable(error)


def test_cli_error_keys_never_carry_pydantic_internals(tmp_path: Path) -> None:
    text = p5_with("cidr: 10.42.0.0/16\n    adminCidrs: [nope, 5x]", "cidr: 10.42.0.0/16")
    result = plan_file(tmp_path, text)
    assert_refused(result, "goldenenv:network.adminCidrs")
    for part in INTERNALS:
        assert part not in result.output


@pytest.mark.parametrize("field,value,says", [
    ("sizeGib", 3000, "multiple of 2400"),
    ("throughputPerTib", 200, "125, 250, 500, 1000 MB/s per TiB"),
])
def test_lustre_sizes_are_the_aws_clouds_to_judge(field, value, says) -> None:
    """FSx for Lustre's sizes and tiers are AWS's, checked by the AWS cloud (another cloud offers others)."""
    config = p5_config()
    _set(("goldenenv:storage", "parallelFs", field), value)(config)
    problem = problem_at(plan_errors(config), f"goldenenv:storage.parallelFs.{field}")
    assert says in problem.message
