"""The cost gate judges what `up` may deploy, on every cloud of the registry and every shipped stack.

Two ways it failed open (issue 35, item 4): it judged only the capacity the stack file names, so a stack the budget
could pay on spot was deployed on its on-demand fallback; and a type with no price in the stack's region was
priced from another region, silently. The rules: every capacity in the failover order is priced and the dearest
decides (the refusal names it); a compute price is the stack region's own, else the gate refuses naming the type
and the region until goldenenv:nodes.pricePerHour gives one.

Budgets here come from the catalog's rows read as a user would read the CSV, never from the gate's own sums.
"""

from __future__ import annotations

import copy
import json
import csv
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import automation, catalog, clouds, costgate, costs, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.base import Capability, head_shape
from goldenenv.guardrails import Severity
from goldenenv.plan import OVER_BUDGET, UNPRICED, cost_findings

from shipped import STACKS, pulumi_stacks

runner = CliRunner()
SHIPPED = pulumi_stacks()
CLOUDS = Path(clouds.__file__).parent
RUN_HOURS = 1000
NODES = 8
"""Enough node-hours that the gap between spot and on-demand outweighs every line the capacity does not move."""


def _csv(name: str, cloud: str) -> list[dict[str, str]]:
    """A cloud's rows of a catalog table, from its own file (goldenenv/clouds/<cloud>/catalog/<name>)."""
    path = CLOUDS / cloud / "catalog" / name
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _row(table: str, cloud: str, instance_type: str, region: str) -> float | None:
    for r in _csv(table, cloud):
        if (r["instance_type"], r["region"]) == (instance_type, region) and \
                r.get("capacity", "on-demand") == "on-demand":
            return float(r["usd_per_hour"])
    return None


def _config(stack: str) -> dict:
    return copy.deepcopy(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))


def _pools(config: dict) -> list[dict]:
    nodes = config["goldenenv:nodes"]
    return nodes if isinstance(nodes, list) else [nodes]


def _gate(stack: str, config: dict, allow_over_budget: bool = False):
    """The gate as plan runs it, without the Pulumi program (the resources only count NAT gateways)."""
    values, unknown = stackconfig.namespaced(config)
    spec = stackconfig.load(stack, values, unknown)
    head = head_shape(spec, clouds.get(spec.cloud))
    lines = costs.stack_lines(spec, None, head)
    return cost_findings(spec, lines, allow_over_budget, costgate.steps(spec, None, head, lines))


def _spot_then_on_demand(config: dict, fallback: bool) -> tuple[str, float, float]:
    """The stack's first pool on spot (with an on-demand fallback when asked), NODES nodes, a RUN_HOURS run and a
    budget halfway between the run's compute on spot and on on-demand, from the catalog's rows."""
    pool = _pools(config)[0]
    cloud, region, name = config["goldenenv:cloud"], config["goldenenv:region"], pool["instanceType"]
    on_demand = _row("prices.csv", cloud, name, region)
    spot = _row("spot_prices.csv", cloud, name, region) or on_demand  # no snapshot: spot bills up to on-demand
    for other in _pools(config)[1:]:
        other["capacity"] = "on-demand"
    pool.update({"count": NODES, "capacity": "spot"})
    pool.pop("capacityReservationId", None)
    if fallback:
        pool["capacityFallback"] = ["spot", "on-demand"]
    config["goldenenv:run"] = {"hours": RUN_HOURS}
    config["goldenenv:budget"] = {**config["goldenenv:budget"],
                                  "monthlyLimit": round(RUN_HOURS * NODES * (spot + on_demand) / 2)}
    return name, spot, on_demand


def _needs_spot(cloud: str) -> None:
    """A fallback from spot is only there to judge on a cloud that sells spot (Capability.SPOT)."""
    if Capability.SPOT not in clouds.get(cloud).capabilities:
        pytest.skip(f"{cloud} sells no spot (no Capability.SPOT): no fallback from spot to judge")


def _errors(findings, rule: str) -> list[str]:
    return [f.message for f in findings if f.rule == rule and f.severity is Severity.ERROR]


def test_every_cloud_of_the_registry_has_a_shipped_stack_for_the_gate():
    assert {cloud for cloud, _ in SHIPPED} == {name for name in clouds.names() if clouds.get(name).uses_pulumi}


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_an_on_demand_fallback_the_budget_cannot_pay_is_refused_naming_it(cloud, stack):
    _needs_spot(cloud)
    config = _config(stack)
    name, spot, on_demand = _spot_then_on_demand(config, fallback=False)
    alone = _gate(stack, config)
    fallback = _config(stack)
    _spot_then_on_demand(fallback, fallback=True)
    refused = _errors(_gate(stack, fallback), OVER_BUDGET)
    assert refused, f"{stack}: spot then on-demand at a budget only spot fits passed the gate"
    if spot < on_demand:
        assert not _errors(alone, OVER_BUDGET), f"{stack}: the spot run alone fits its budget"
        assert "up may fall back to" in refused[0] and "on on-demand" in refused[0], refused[0]
        assert "capacityFallback after spot" in refused[0], refused[0]
    else:  # the catalog has no spot snapshot here: spot is judged at its on-demand ceiling, so it never fits alone
        assert _errors(alone, OVER_BUDGET), f"{stack}: spot without a snapshot is priced below on-demand"


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_allow_over_budget_goes_ahead_and_says_the_fallback_is_over(cloud, stack):
    _needs_spot(cloud)
    config = _config(stack)
    _spot_then_on_demand(config, fallback=True)
    findings = _gate(stack, config, allow_over_budget=True)
    [said] = [f for f in findings if f.rule == OVER_BUDGET]
    assert said.severity is Severity.WARNING and "going ahead" in said.message
    assert "on-demand" in said.message


def _priced_elsewhere_only(monkeypatch, cloud: str, instance_type: str, region: str) -> str:
    """The catalog as it would be if the type's rows in `region` (on-demand and spot) were another region's (the
    case that used to be priced silently from there): returns that other region."""
    elsewhere = next(r["region"] for r in _csv("prices.csv", cloud) if r["region"] != region)
    rows = catalog._prices()
    moved = tuple(replace(p, region=elsewhere) if (p.cloud, p.instance_type, p.region) == (cloud, instance_type, region)
                  else p for p in rows)
    monkeypatch.setattr(catalog, "_prices", lambda: moved)
    read = catalog._read

    def spot_moved(table: str):
        if table != "spot_prices":
            return read(table)
        return tuple({**r, "region": elsewhere} if (r["cloud"], r["instance_type"], r["region"])
                     == (cloud, instance_type, region) else r for r in read(table))

    monkeypatch.setattr(catalog, "_read", spot_moved)
    return elsewhere


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_a_type_with_no_price_in_the_stacks_region_is_refused_naming_both(cloud, stack, monkeypatch):
    config = _config(stack)
    region, name = config["goldenenv:region"], _pools(config)[0]["instanceType"]
    elsewhere = _priced_elsewhere_only(monkeypatch, cloud, name, region)
    [refusal] = _errors(_gate(stack, config), UNPRICED)
    assert f"{name} in {region}" in refusal and "goldenenv:nodes.pricePerHour" in refusal, refusal
    assert elsewhere not in refusal, "another region's price is not offered as this region's"
    _pools(config)[0]["pricePerHour"] = 12.5
    judged = _gate(stack, config)
    assert not [f for f in judged if f.rule == UNPRICED], judged
    assert not [f for f in judged if f.severity is Severity.ERROR and f.rule.startswith("cost:")], judged


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_every_shipped_stack_is_priced_in_its_own_region(cloud, stack):
    config = _config(stack)
    region = config["goldenenv:region"]
    for pool in _pools(config):
        if "pricePerHour" not in pool:
            assert _row("prices.csv", cloud, pool["instanceType"], region) is not None, (stack, pool["instanceType"])
    values, unknown = stackconfig.namespaced(config)
    head = head_shape(stackconfig.load(stack, values, unknown), clouds.get(cloud))
    if head is not None:
        assert _row("prices.csv", cloud, head.instance_type, region) is not None, (stack, head.instance_type)


def _write(tmp_path: Path, stack: str, config: dict) -> Path:
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return tmp_path


def _first_stack_of_each_cloud() -> list[tuple[str, str]]:
    return list({cloud: (cloud, stack) for cloud, stack in reversed(SHIPPED)}.values())


@pytest.mark.parametrize("cloud,stack", [(c, s) for c, s in _first_stack_of_each_cloud()
                                         if clouds.Capability.SPOT in clouds.get(c).capabilities])
def test_plan_strict_exits_1_on_a_fallback_over_budget(cloud, stack, tmp_path):
    over = _config(stack)
    _, spot, on_demand = _spot_then_on_demand(over, fallback=True)
    stacks = _write(tmp_path, stack, over)
    result = runner.invoke(app, ["plan", "-s", stack, "--stacks-dir", str(stacks), "--strict"],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    [said] = [line for line in result.output.splitlines() if OVER_BUDGET in line]
    assert said.split()[0] == "error", said
    if spot < on_demand:  # else spot is judged at its on-demand ceiling and refused on its own
        assert "up may fall back to" in said, said


def test_plan_strict_exits_1_on_a_type_unpriced_in_the_stacks_region(tmp_path, monkeypatch):
    stack = "aws-g5-dev"
    config = _config(stack)
    region, name = config["goldenenv:region"], _pools(config)[0]["instanceType"]
    _priced_elsewhere_only(monkeypatch, "aws", name, region)
    stacks = _write(tmp_path, stack, config)
    result = runner.invoke(app, ["plan", "-s", stack, "--stacks-dir", str(stacks), "--strict"],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    [said] = [line for line in result.output.splitlines() if UNPRICED in line]
    assert f"{name} in {region}" in said, said


def test_up_refuses_a_fallback_over_budget_before_anything_is_created(tmp_path):
    stack = "aws-p4d-4node-spot"
    config = _config(stack)
    _spot_then_on_demand(config, fallback=True)
    stacks = _write(tmp_path, stack, config)
    values, unknown = stackconfig.namespaced(config)
    with pytest.raises(automation.LifecycleError, match="cost:over-budget: up may fall back to gpu on on-demand"):
        automation.guard(stackconfig.load(stack, values, unknown), creating=False, stacks_dir=stacks)


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_the_shipped_stacks_pass_the_gate_with_no_refusal(cloud, stack):
    judged = _gate(stack, _config(stack))
    assert not [f for f in judged if f.severity is Severity.ERROR], judged
    assert not [f for f in judged if f.rule in (OVER_BUDGET, UNPRICED)], judged


@pytest.mark.parametrize("stack,hourly", [
    # Azure Retail Prices API (https://prices.azure.com/api/retail/prices): Standard_ND96isr_H100_v5, eastus, Linux
    ("azure-ndh100-2node", 2 * 98.32),
    # instances.vantage.sh (AWS on-demand Linux, us-east-1), after the June 2025 P5 price cut
    ("aws-p5-2node", 2 * 55.04),
])
def test_the_gate_prices_from_the_public_price_pages(stack, hourly):
    config = _config(stack)
    values, unknown = stackconfig.namespaced(config)
    spec = stackconfig.load(stack, values, unknown)
    [line] = [line for line in costs.stack_lines(spec) if line.name == f"compute {spec.nodes[0].name}"]
    assert line.amount == pytest.approx(hourly)


class _Deployed:
    """An Automation API stack whose first up succeeds: nothing is rented here."""

    def __init__(self):
        self.ups = 0

    def outputs(self):
        return {}

    def up(self, on_output=None, refresh=None):
        self.ups += 1
        return type("Result", (), {"outputs": {}})()


def test_up_with_allow_over_budget_goes_ahead_and_says_which_places_are_over(tmp_path, monkeypatch):
    stack = "aws-p4d-4node-spot"
    config = _config(stack)
    _spot_then_on_demand(config, fallback=True)
    stacks = _write(tmp_path, stack, config)
    real_guard = automation.guard
    monkeypatch.setattr(automation, "guard", lambda spec, creating, allow_over_budget=False: real_guard(
        spec, creating=False, stacks_dir=stacks, allow_over_budget=allow_over_budget))
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: None)
    values, unknown = stackconfig.namespaced(config)
    spec, target, said = stackconfig.load(stack, values, unknown), _Deployed(), []
    with pytest.raises(automation.LifecycleError, match="cost:over-budget"):
        automation.up(spec, log=said.append, target=target, sleep=lambda s: None)
    assert target.ups == 0
    automation.up(spec, log=said.append, target=target, allow_over_budget=True, sleep=lambda s: None)
    assert target.ups == 1
    [over] = [line for line in said if line.startswith(f"{OVER_BUDGET}:")]
    assert "going ahead" in over and "Over the budget in up's order: gpu on on-demand" in over, over


def test_plan_shows_each_capacity_up_may_take_and_what_it_costs(tmp_path):
    stack = "aws-p4d-4node-spot"
    config = _config(stack)
    _, spot, on_demand = _spot_then_on_demand(config, fallback=True)
    stacks = _write(tmp_path, stack, config)
    result = runner.invoke(app, ["plan", "-s", stack, "--stacks-dir", str(stacks), "--json"])
    assert result.exit_code == 1
    shown = json.loads(result.output)["cost"]["failover"]
    assert [(step["capacity"], step["asFiled"]) for step in shown] == [({"gpu": "spot"}, True),
                                                                       ({"gpu": "on-demand"}, False)]
    budget = config["goldenenv:budget"]["monthlyLimit"]
    assert shown[0]["run"] < budget < shown[1]["run"]
    assert shown[1]["perHour"] - shown[0]["perHour"] == pytest.approx(NODES * (on_demand - spot), abs=0.01)


def _head_type(stack: str) -> str | None:
    config = _config(stack)
    values, unknown = stackconfig.namespaced(config)
    head = head_shape(stackconfig.load(stack, values, unknown), clouds.get(config["goldenenv:cloud"]))
    return head.instance_type if head else None


@pytest.mark.parametrize("cloud,stack", [(c, s) for c, s in SHIPPED if _head_type(s)])
def test_a_head_with_no_price_in_the_stacks_region_is_refused_naming_it(cloud, stack, monkeypatch):
    config = _config(stack)
    region, head = config["goldenenv:region"], _head_type(stack)
    _priced_elsewhere_only(monkeypatch, cloud, head, region)
    [refusal] = _errors(_gate(stack, config), UNPRICED)
    assert f"the head's {head} in {region}" in refusal and "goldenenv:head.instanceType" in refusal, refusal
