"""The cost model (goldenenv.costs) and the cost gate in `plan` / `up`, as a user meets them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import automation, catalog, costs, stackconfig
from goldenenv.cli import app
from goldenenv.guardrails import Severity
from goldenenv.plan import STACKS, plan
from goldenenv.spec import ConfigError

runner = CliRunner()


def _config(stack: str = "aws-p5-2node") -> dict:
    return yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())


def _write(tmp_path: Path, name: str, doc: dict) -> Path:
    (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def _spec(stack: str = "aws-p5-2node", **config):
    doc = _config(stack)["config"]
    doc.update({f"goldenenv:{k}": v for k, v in config.items()})
    return stackconfig.load(stack, *stackconfig.namespaced(doc))


# ---------------------------------------------------------------- literal anchors from public price tables

@pytest.mark.parametrize(("table", "item", "tier", "unit", "price"), [
    ("network_prices", "nat-gateway", "", "hour", 0.045),          # Amazon VPC pricing, us-east-1
    ("network_prices", "nat-gateway-data", "", "GB", 0.045),
    ("network_prices", "interface-endpoint", "", "hour", 0.01),    # AWS PrivateLink pricing, per AZ
    ("storage_prices", "object-store", "standard", "GB-month", 0.023),  # S3 Standard, first 50 TB
    ("storage_prices", "block-volume", "gp3", "GB-month", 0.08),
    ("storage_prices", "parallel-fs", "125", "GB-month", 0.145),   # FSx for Lustre PERSISTENT_2 SSD
    ("storage_prices", "parallel-fs", "250", "GB-month", 0.21),
    ("storage_prices", "parallel-fs", "500", "GB-month", 0.29),
    ("storage_prices", "parallel-fs", "1000", "GB-month", 0.42),
])
def test_us_east_1_list_prices_match_the_public_tables(table, item, tier, unit, price):
    row = catalog.service_price(table, "aws", item, "us-east-1", tier)
    assert row is not None and (row.region, row.unit, row.currency) == ("us-east-1", unit, "USD")
    assert row.price == price
    assert row.as_of and row.source.startswith(("Amazon", "AWS")) and catalog.UNVERIFIED not in row.source


def test_every_service_price_row_has_a_date_a_currency_and_a_unit():
    for table in ("storage_prices", "network_prices"):
        for r in catalog.rows(table):
            assert r["as_of"][:2] == "20" and len(r["currency"]) == 3 and r["unit"] in {"GB-month", "hour", "GB"}, r


def test_spot_prices_are_a_dated_snapshot_never_above_on_demand():
    for r in catalog.rows("spot_prices"):
        assert r["snapshot"][:2] == "20" and "snapshot" in r["source"], r
        # a placeholder (the on-demand ceiling standing in) says so and is unverified; a snapshot whose own rows
        # look wrong (GCP's, split into host and GPU rows) says that too
        assert "placeholder" not in r["source"] or catalog.UNVERIFIED in r["source"], r
        on_demand = catalog.price(r["cloud"], r["instance_type"], r["region"])
        assert on_demand is not None and float(r["usd_per_hour"]) <= on_demand.usd_per_hour, r


# ---------------------------------------------------------------- the model

def test_spot_reads_the_snapshot_and_falls_back_to_on_demand_with_a_note():
    spot = costs.compute_price("aws", "p4d.24xlarge", "us-west-2", "spot")
    assert spot.capacity == "spot" and spot.as_of == catalog.rows("spot_prices")[0]["snapshot"]
    assert costs.compute_price("aws", "g6e.48xlarge", "us-east-1", "spot").capacity == "on-demand"
    line = costs.run_cost("aws", "g6e.48xlarge", "us-east-1", "spot", 1, 1)
    assert "no spot snapshot" in line.basis and "ceiling" in line.basis


def test_run_cost_is_hours_times_nodes_times_price_over_scaling_efficiency():
    line = costs.run_cost("aws", "p5.48xlarge", "us-east-1", "on-demand", 2, 10, scaling_efficiency=0.8)
    assert line.per == "run" and line.currency == "USD"
    assert line.amount == pytest.approx(10 * 2 * 55.04 / 0.8)
    assert "0.8 scaling efficiency" in line.basis and "2026-08-26" in line.source
    with pytest.raises(ValueError):
        costs.run_cost("aws", "p5.48xlarge", "us-east-1", "on-demand", 2, 10, scaling_efficiency=1.5)


def test_every_line_is_there_for_aws_p5_2node():
    p = plan("aws-p5-2node")
    lines = {line.name: line for line in p.lines}
    assert set(lines) == {"compute gpu", "compute head", "object storage", "parallel file system", "block volumes",
                          "NAT gateway", "NAT gateway data", "internet egress"}
    assert all(line.per == "hour" and line.currency == "USD" and line.source for line in p.lines)
    assert lines["compute gpu"].amount == pytest.approx(2 * 55.04)
    # the Slurm head: one on-demand m7i.large, its root volume as large as the nodes' (the same golden image)
    assert lines["compute head"].amount == pytest.approx(0.1008)
    assert "m7i.large" in lines["compute head"].basis and "on-demand" in lines["compute head"].basis
    assert lines["parallel file system"].amount == pytest.approx(4800 * 0.21 / 730)
    assert lines["block volumes"].amount == pytest.approx((2 * 200 + 200) * 0.08 / 730)
    assert "1 × 200 GiB head root" in lines["block volumes"].basis
    assert lines["NAT gateway"].amount == pytest.approx(0.045)
    assert lines["object storage"].amount == 0 and "assumed" in lines["object storage"].basis
    assert p.usd_per_hour == pytest.approx(sum(line.amount for line in p.lines))

    doc = json.loads(runner.invoke(app, ["plan", "-s", "aws-p5-2node", "--json"]).output)
    assert [line["name"] for line in doc["cost"]["lines"]] == [line.name for line in p.lines]
    shown = runner.invoke(app, ["plan", "-s", "aws-p5-2node"], env={"COLUMNS": "250"}).output
    for name in lines:
        assert name in shown
    assert "0.045" in shown and "110.08" in shown


def test_interface_endpoints_are_priced_per_endpoint_hour_when_egress_is_endpoints(tmp_path):
    doc = _config()
    doc["config"]["goldenenv:network"] = {"cidr": "10.42.0.0/16", "egress": "endpoints"}
    p = plan("ep", _write(tmp_path, "ep", doc))
    endpoints = next(line for line in p.lines if line.name == "interface endpoints")
    created = sum(1 for r in p.resources if r.type.endswith("VpcEndpoint") and r.props.get("vpcEndpointType") == "Interface")
    assert created and endpoints.amount == pytest.approx(created * 0.01)
    assert not [line for line in p.lines if line.name.startswith("NAT")]


def test_a_run_section_adds_dataset_storage_and_an_idle_line():
    spec = _spec(run={"hours": 100, "idleHours": 10, "datasetGb": 1000, "checkpointGb": 460})
    lines = {line.name: line for line in costs.stack_lines(spec)}
    assert lines["object storage"].amount == pytest.approx(1460 * 0.023 / 730)
    idle = lines["idle development time"]
    assert idle.per == "run" and idle.kind == "idle" and "idleHours 10" in idle.basis
    hourly_without_bucket = sum(line.amount for line in lines.values()
                                if line.per == "hour" and line.name != "object storage")
    assert idle.amount == pytest.approx(10 * hourly_without_bucket)


# ---------------------------------------------------------------- the gate

def _run_stack(tmp_path: Path, name: str, *, budget: float | None = None, hours: float | None = 100,
               **overrides) -> Path:
    doc = _config()
    if budget is not None:
        doc["config"]["goldenenv:budget"]["monthlyLimit"] = budget
    if hours is not None:
        doc["config"]["goldenenv:run"] = {"hours": hours}
    doc["config"].update(overrides)
    return _write(tmp_path, name, doc)


def _gate(p) -> list:
    return [f for f in p.findings if f.rule.startswith("cost:")]


def test_the_gate_passes_a_budget_exactly_equal_to_the_run_and_refuses_a_cent_less(tmp_path):
    cost = plan("r", _run_stack(tmp_path, "r")).run_cost
    # 111.55 USD/h of nodes, storage and network, and the Slurm head's 0.1008 + its 200 GiB gp3 volume
    assert cost == pytest.approx(100 * (111.55 + 0.1008 + 200 * 0.08 / 730), abs=1)

    exact = plan("exact", _run_stack(tmp_path, "exact", budget=round(cost, 2)))
    assert not exact.failed and [f.rule for f in _gate(exact)] == ["cost:run"]

    short = plan("short", _run_stack(tmp_path, "short", budget=round(cost, 2) - 0.01))
    [finding] = _gate(short)
    assert short.failed and finding.rule == "cost:over-budget" and finding.severity is Severity.ERROR
    assert f"{round(cost, 2):,.2f}" in finding.message and "--allow-over-budget" in finding.message

    allowed = plan("short", tmp_path, allow_over_budget=True)
    [finding] = _gate(allowed)
    assert finding.severity is Severity.WARNING and not allowed.failed


def test_plan_and_up_take_allow_over_budget(tmp_path, monkeypatch):
    stacks = _run_stack(tmp_path, "over", budget=1000)
    refused = runner.invoke(app, ["plan", "-s", "over", "--stacks-dir", str(stacks)], env={"COLUMNS": "250"})
    assert refused.exit_code == 1 and "cost:over-budget" in refused.output
    allowed = runner.invoke(app, ["plan", "-s", "over", "--stacks-dir", str(stacks), "--allow-over-budget", "--json"])
    doc = json.loads(allowed.output)
    assert allowed.exit_code == 0, allowed.output
    assert [f["severity"] for f in doc["findings"] if f["rule"] == "cost:over-budget"] == ["warning"]
    assert doc["cost"]["run"]["hours"] == 100 and doc["cost"]["run"]["total"] > 1000

    spec = stackconfig.load("over", *stackconfig.namespaced(stackconfig.read_stack_file(stacks / "Pulumi.over.yaml")))
    with pytest.raises(automation.LifecycleError, match="cost:over-budget"):
        automation.guard(spec, creating=False, stacks_dir=stacks)
    automation.guard(spec, creating=False, stacks_dir=stacks, allow_over_budget=True)

    seen = {}
    monkeypatch.setattr(automation, "up", lambda spec, **kw: seen.update(kw) or {})
    runner.invoke(app, ["up", "-s", "aws-p5-2node", "--allow-over-budget"])
    assert seen.get("allow_over_budget") is True


def test_256_p5_on_a_1000_usd_budget_exits_1_naming_the_cost_and_the_budget(tmp_path):
    stacks = _run_stack(tmp_path, "huge", budget=1000, hours=None,
                        **{"goldenenv:nodes": {"instanceType": "p5.48xlarge", "count": 256}})
    result = runner.invoke(app, ["plan", "-s", "huge", "--stacks-dir", str(stacks)], env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    assert "cost:budget-below-one-hour" in result.output
    assert "$1,000.00/month" in result.output
    assert f"{256 * 55.04:,.2f}" in result.output  # the compute line: 256 × 55.04 USD/h
    [message] = [line for line in result.output.splitlines() if "cost:budget-below-one-hour" in line]
    assert "$1,000.00/month" in message and "$14,0" in message and "/hour" in message
    assert "budget lasts 0.0 days" not in result.output


def test_without_a_run_section_the_plan_warns_with_the_runway():
    p = plan("aws-p5-2node")
    [finding] = _gate(p)
    assert finding.rule == "cost:runway" and finding.severity is Severity.WARNING
    assert "budget lasts 14.9 days" in finding.message and "hard stop" in finding.message


def test_local_stacks_are_not_judged():
    assert _gate(plan("local")) == []


@pytest.mark.parametrize(("run", "key"), [
    ({"hours": -5}, "goldenenv:run.hours"),
    ({"hours": 0}, "goldenenv:run.hours"),
    ({"hours": 10, "idleHours": -1}, "goldenenv:run.idleHours"),
    ({"hours": 10, "datasetGB": 5}, "goldenenv:run.datasetGB"),
    ({"idleHours": 3}, "goldenenv:run.hours"),
])
def test_a_bad_run_section_names_the_key(run, key):
    with pytest.raises(ConfigError) as e:
        _spec(run=run)
    assert key in [p.key for p in e.value.problems], [str(p) for p in e.value.problems]


def test_a_run_with_scaling_efficiency_egress_and_its_own_price():
    """goldenenv:run says what the user knows: the hours at perfect scaling are billed ÷ scalingEfficiency (in
    tenths of an hour), egressGb at the catalog's egress price, pricePerGpuHour over the catalog's compute price."""
    base = _spec(run={"hours": 20})
    spec = _spec(run={"hours": 20, "scalingEfficiency": 0.7, "egressGb": 100, "pricePerGpuHour": 3})
    pool = spec.nodes[0]
    gpus = catalog.instance_type("aws", pool.instance_type).gpu_count
    hourly = {line.name: line for line in costs.stack_lines(spec)}
    assert hourly[f"compute {pool.name}"].amount == pool.count * gpus * 3
    run = {line.name: line for line in costs.run_lines(spec, costs.stack_lines(spec))}
    assert run[f"compute {pool.name}"].amount == pytest.approx(28.6 * pool.count * gpus * 3)
    assert "scalingEfficiency 0.7" in run[f"compute {pool.name}"].basis
    egress = catalog.service_price(costs.NETWORK, "aws", "internet-egress", spec.region).price
    assert run["internet egress (run)"].amount == pytest.approx(100 * egress)
    base_run = {line.name: line for line in costs.run_lines(base, costs.stack_lines(base))}
    catalog_rate = catalog.price("aws", pool.instance_type, spec.region).usd_per_hour
    assert base_run[f"compute {pool.name}"].amount == pytest.approx(20 * pool.count * catalog_rate)


@pytest.mark.parametrize(("run", "key"), [
    ({"hours": 10, "scalingEfficiency": 0}, "goldenenv:run.scalingEfficiency"),
    ({"hours": 10, "scalingEfficiency": 1.5}, "goldenenv:run.scalingEfficiency"),
    ({"hours": 10, "egressGb": -1}, "goldenenv:run.egressGb"),
    ({"hours": 10, "pricePerGpuHour": 0}, "goldenenv:run.pricePerGpuHour"),
])
def test_a_bad_run_figure_names_the_key(run, key):
    with pytest.raises(ConfigError) as e:
        _spec(run=run)
    assert key in [p.key for p in e.value.problems], [str(p) for p in e.value.problems]


def _unpriced_stack(tmp_path: Path, **pool) -> Path:
    """64 A100s (8 × ecs.ebmgn7vx.32xlarge, a type the catalog does not price) for a 730 h run on 100 CNY."""
    doc = _config("alicloud-ebmgn8v-2node")
    config = doc["config"]
    config["goldenenv:nodes"] = {**config["goldenenv:nodes"], "instanceType": "ecs.ebmgn7vx.32xlarge", "count": 8,
                                 **pool}
    config["goldenenv:budget"]["monthlyLimit"] = 100
    config["goldenenv:run"] = {"hours": 730}
    return _write(tmp_path, "a100x64", doc)


def test_a_pool_the_catalog_cannot_price_fails_the_gate_closed(tmp_path):
    stacks = _unpriced_stack(tmp_path)
    assert catalog.price("alicloud", "ecs.ebmgn7vx.32xlarge", "cn-wulanchabu") is None
    for strict in ([], ["--strict"]):
        result = runner.invoke(app, ["plan", "-s", "a100x64", "--stacks-dir", str(stacks), *strict],
                               env={"COLUMNS": "400"})
        assert result.exit_code == 1, result.output
        [message] = [line for line in result.output.splitlines() if "cost:unpriced" in line]
        assert "cannot judge the cost of ecs.ebmgn7vx.32xlarge" in message and "nodes.pricePerHour" in message
        assert "0.00 CNY/hour" not in result.output and "$" not in result.output.split("cost (catalog")[-1][:2000]
        assert "total unknown: no price for ecs.ebmgn7vx.32xlarge" in result.output
    doc = json.loads(runner.invoke(app, ["plan", "-s", "a100x64", "--stacks-dir", str(stacks), "--json"]).output)
    assert doc["cost"]["perHour"] is None and doc["cost"]["unpriced"] == ["ecs.ebmgn7vx.32xlarge"]
    allowed = plan("a100x64", stacks, allow_over_budget=True)
    assert [(f.rule, f.severity) for f in _gate(allowed)] == [("cost:unpriced", Severity.WARNING)]


def test_a_price_the_user_states_lets_the_gate_judge(tmp_path):
    stacks = _unpriced_stack(tmp_path, pricePerHour=250)
    p = plan("a100x64", stacks)
    line = next(line for line in p.lines if line.name.startswith("compute") and "ebmgn7vx" in line.basis)
    assert line.amount == 8 * 250 and "nodes.pricePerHour" in line.source
    assert [f.rule for f in _gate(p) if f.severity is Severity.ERROR] == ["cost:over-budget"]
