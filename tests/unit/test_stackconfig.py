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
    assert stackconfig.load("test", values, unknown).nodes[0].efa is None


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
    pytest.param(_set(("goldenenv:storage", "parallelFs", "sizeGib"), 3000),
                 "goldenenv:storage.parallelFs.sizeGib", "multiple of 2400", id="lustre-size"),
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
