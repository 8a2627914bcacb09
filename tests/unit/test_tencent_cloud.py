"""Tencent Cloud's stack rules: bad input is refused at its key (exit 2 in the CLI), each anchored on the fact it
rests on; the stop function's verdicts on Tencent's bill; the data flow's export; the CAM judge."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from goldenenv import clouds, stackconfig
from goldenenv.clouds.tencent import dataflow, privilege, stop
from goldenenv.spec import ConfigError

STACKS = Path(__file__).resolve().parents[2] / "stacks"
HCC, DEV = "tencent-hccpnv5-2node", "tencent-gn7-dev"


def refusals(stack: str, **changes) -> list[str]:
    values, _ = stackconfig.namespaced(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    values = copy.deepcopy(values)
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            values.setdefault(section, {})
            values[section] = {**values[section], field: value}
        else:
            values[section] = value
    try:
        clouds.validate(stackconfig.load(stack, values))
    except ConfigError as e:
        return [str(p) for p in e.problems]
    return []


def test_the_shipped_stacks_pass():
    assert refusals(HCC) == [] and refusals(DEV) == []


def test_rdma_on_a_type_that_is_not_hcc_is_refused_naming_the_key():
    found = refusals(DEV, nodes__rdma=True)
    assert any(p.startswith("goldenenv:nodes.rdma") for p in found), found


def test_cfs_turbo_below_its_minimum_or_off_its_step_is_refused():
    below = refusals(HCC, storage={"parallelFs": {"sizeGib": 10240}})
    assert any(p.startswith("goldenenv:storage.parallelFs.sizeGib") and "20,480" in p for p in below), below
    step = refusals(HCC, storage={"parallelFs": {"sizeGib": 25000}})
    assert any("10,240" in p for p in step), step


@pytest.mark.parametrize("key", ["qcs:team", "projectx", "项目组"])
def test_a_reserved_tag_prefix_is_refused_at_its_key(key):
    found = refusals(DEV, tags__extra={key: "a"})
    assert any(p.startswith(f"goldenenv:tags.extra.{key}") and "reserves" in p for p in found), found


def test_spot_is_refused_on_the_international_site_and_without_a_price_to_bid():
    international = refusals(DEV, nodes__capacity="spot", budget={"monthlyLimit": 800, "currency": "USD",
                                                                  "emails": ["a@example.com"]})
    assert any(p.startswith("goldenenv:nodes.capacity") and "International" in p for p in international)
    unpriced = refusals(DEV, region="ap-shanghai", zone="ap-shanghai-2", nodes__capacity="spot")
    assert any(p.startswith("goldenenv:nodes.capacity") and "no price" in p for p in unpriced), unpriced


def test_ttl_and_idle_are_taken_with_a_budget_and_refused_without_one():
    """They run in the budget's stop function: a stack that says `budget: none` has none to run them."""
    assert refusals(DEV, lifecycle={"ttlHours": 8, "idleMinutes": 30}) == []
    found = refusals(DEV, budget="none", lifecycle={"ttlHours": 8, "idleMinutes": 30})
    assert [p.split(":")[1].split(" ")[0] for p in found] == ["lifecycle.ttlHours", "lifecycle.idleMinutes"], found
    assert all("goldenenv:budget" in p for p in found), found


def _api(ready: int, cost: str | None):
    calls = []

    def api(service, version, action, params):
        calls.append(action)
        if action == "DescribeBillSummaryByTag":
            rows = [] if cost is None else [{"TagValue": "dev", "RealTotalCost": cost}]
            return {"Ready": ready, "SummaryOverview": rows}
        if action == "DescribeInstances":
            state = "STOPPED" if "StopInstances" in calls else "RUNNING"  # the accepted stop has finished
            return {"TotalCount": 1, "InstanceSet": [{"InstanceId": "ins-1", "InstanceState": state}]}
        return {}
    return api, calls


ENV = {stop.REGION_ENV: "ap-guangzhou", stop.LIMIT_ENV: "1000", stop.CURRENCY_ENV: "CNY", stop.HARD_STOP_ENV: "true",
       stop.TAG_KEY_ENV: "goldenenv:stack", stop.TAG_VALUE_ENV: "dev", stop.PROJECT_KEY_ENV: "goldenenv-project",
       stop.PROJECT_VALUE_ENV: "p"}


@pytest.mark.parametrize("ready, cost, stops", [(1, "999.99", False), (1, "1000.00", True), (0, "5.00", True),
                                                (1, None, True), (1, "n/a", True)])
def test_the_stop_fails_closed_on_a_bill_that_is_not_ready_or_unreadable(ready, cost, stops):
    from stopfakes import simulated_clock

    api, calls = _api(ready, cost)
    answer = stop.handler({}, None, env=ENV, api=api, clock=simulated_clock(600))
    assert answer["stop"] is stops and ("StopInstances" in calls) is stops


def test_a_failed_export_stops_destroy_before_anything_is_deleted():
    from goldenenv.clouds.tencent import TencentCloud, StoreError

    def call(region, action, params):
        return {"CreateLifecycleDataTask": {"TaskId": "t-1"},
                "DescribeLifecycleDataTask": {"TaskInfo": [{"TaskStatus": "failed"}]}}[action]

    spec = SimpleNamespace(region="ap-guangzhou", storage=None)
    with pytest.raises(StoreError, match="Nothing was destroyed"):
        TencentCloud().before_destroy(spec, {"fileSystemId": "cfs-1", "dataFlowId": "df-1"}, False, print,
                                      call=call)
    seen = []
    dataflow.run_task("r", "cfs-1", "df-1", dataflow.ARCHIVE, "/", seen.append, call=lambda r, a, p: {
        "CreateLifecycleDataTask": {"TaskId": "t-2"},
        "DescribeLifecycleDataTask": {"TaskInfo": [{"TaskStatus": "completed"}]}}[a], sleep=lambda s: None)
    assert seen[-1] == "archive task t-2 finished"


def test_the_programs_cam_documents_are_exactly_the_table():
    node = privilege.as_iam(privilege.node_document("ap-guangzhou", "125", "b-125", "s",
                                                            registry=("tcr-1", "ns", "repo")))
    actions = {a for s in node["Statement"] for a in s["Action"]}
    assert actions == set(privilege.NEEDS["node"].actions)
    stop_doc = json.loads(privilege.stop_document("goldenenv:stack", "dev"))
    assert stop_doc["statement"][1]["condition"] == {
        "for_any_value:string_equal": {"qcs:resource_tag": ["goldenenv:stack&dev"]}}
    trust = json.loads(privilege.trust_document("stop"))
    assert trust["statement"][0]["principal"] == {"service": ["scf.qcloud.com"]}


def test_a_sell_out_in_the_providers_words_is_a_capacity_error_and_a_quota_is_not():
    from goldenenv import failover

    sold_out = ("error: 1 error occurred:\n * [TencentCloudSDKError] Code=ResourceInsufficient.SpecifiedInstanceType, "
                "Message=The specified type of instance is understocked., RequestId=9a2b")
    quota = "* [TencentCloudSDKError] Code=LimitExceeded.UserSpotQuota, Message=quota, RequestId=1"
    assert (failover.classify("tencent", sold_out).klass, failover.classify("tencent", sold_out).scope) == (
        "capacity", "placement")
    assert failover.classify("tencent", quota).code == "LimitExceeded.UserSpotQuota"
    assert failover.classify("tencent", quota).klass == "quota"
