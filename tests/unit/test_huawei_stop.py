"""Huawei Cloud's stop function (goldenenv/clouds/huawei/stop.py, stop_lite.py) on the fake of BSS, ECS, Cloud Eye and
ModelArts (stopfakes/huawei.py): the month it reads is Beijing's, every page of the bill counts, an unreadable bill or
another currency stops the nodes (fail closed), only the stack's own servers and Lite Servers are stopped, each Lite
Server's stop is read back, the time to live counts from creation, and a server is idle only when Cloud Eye shows
it so for the whole window."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from stopfakes import simulated_clock
from stopfakes.huawei import ENV, NOW, FakeHuawei, HuaweiAdapter
from stopfakes.world import Faults, FleetNode, Invocation

from goldenenv.clouds.huawei import privilege, stop, stop_lite


def fleet() -> list[FleetNode]:
    return [FleetNode("dev-0"), FleetNode("dev-1"), FleetNode("other-0", stack="dev-old"),
            FleetNode("untagged-0", stack=None), FleetNode("theirs-0", project="another-project")]


def test_over_the_limit_it_stops_only_the_stacks_own_servers():
    world = HuaweiAdapter(fleet(), Faults())
    outcome = world.invoke("hard-stop")
    assert not outcome.failed, outcome.message
    assert world.running() == {"other-0", "untagged-0", "theirs-0"}
    assert world.touched() == {"dev-0", "dev-1"}


def test_the_bill_is_read_for_the_month_in_beijing_time():
    """20:00 UTC on 31 July is 04:00 on 1 August in Beijing: BSS bills it in August."""
    world = HuaweiAdapter(fleet(), Faults())
    world.invoke("hard-stop")
    assert set(world.api.bill_months) == {"2026-08"}


def test_every_page_of_the_bill_counts():
    """Two servers of 1,200 CNY each: over a 2,000 limit only when both pages are read."""
    world = HuaweiAdapter(fleet(), Faults(page_size=1))
    outcome = world.invoke("hard-stop", **{stop.LIMIT_ENV: "2000"})
    assert not outcome.failed and world.touched() == {"dev-0", "dev-1"}


def test_under_the_limit_nothing_is_stopped():
    world = HuaweiAdapter(fleet(), Faults())
    world.invoke("hard-stop", **{stop.LIMIT_ENV: "5000"})
    assert world.touched() == set()


@pytest.mark.parametrize("fault", ["other-currency", "unreadable-amount", "bill-refused"])
def test_a_bill_that_cannot_be_judged_counts_as_over_the_limit(fault):
    world = HuaweiAdapter(fleet(), Faults())
    if fault == "other-currency":
        world.api.currency = "USD"
    elif fault == "unreadable-amount":
        world.api.records[0]["amount"] = "n/a"
    else:
        original = world.api._bill
        world.api._bill = lambda params: (_ for _ in ()).throw(stop.ApiError(403, "CBC.0150", "no permission"))
        assert original
    world.invoke("hard-stop", **{stop.LIMIT_ENV: "100000"})
    assert world.touched() == {"dev-0", "dev-1"}


def test_hard_stop_off_stops_nothing_and_tells_the_budgets_topic_at_the_limit():
    api = FakeHuawei(fleet(), Faults())
    answer = stop.handler({}, None, env={**ENV, stop.HARD_STOP_ENV: "false"}, api=api, clock=simulated_clock(570),
                          now=NOW)
    assert answer["stop"] is False and api.stop_calls == []
    [(topic, message)] = api.published
    assert topic == ENV[stop.ALERT_TOPIC_ENV] and "2,400.00 CNY of 1,000.00: at or over the limit" in message


def test_a_refused_stop_fails_the_invocation_naming_the_server_and_tells_the_budgets_topic():
    world = HuaweiAdapter(fleet(), Faults(refuse=frozenset({"dev-1"})))
    outcome = world.invoke("hard-stop")
    assert outcome.failed and world.named("dev-1") in outcome.message
    (_, at_limit), (topic, message) = world.api.published
    assert "at or over the limit" in at_limit
    assert topic == ENV[stop.ALERT_TOPIC_ENV] and world.named("dev-1") in message
    assert world.running() >= {"dev-1"} and "dev-0" not in world.running()


@pytest.mark.parametrize("text, pairs", [
    ("goldenenv-stack=dev;project=llm", {"goldenenv-stack": "dev", "project": "llm"}),
    ("goldenenv-stack:dev,owner:ml", {"goldenenv-stack": "dev", "owner": "ml"}),
    ("", {}), (None, {}),
])
def test_a_bill_records_tags_are_read_in_either_form(text, pairs):
    assert stop.tag_pairs(text) == pairs


def test_the_signature_is_huaweis_sdk_hmac_sha256():
    """The canonical request huaweicloudsdkcore 3.1.219 signs, computed here by that SDK's own signer."""
    from datetime import datetime, timezone

    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkcore.sdk_request import SdkRequest
    from huaweicloudsdkcore.signer.signer import Signer

    when = datetime(2026, 8, 1, 4, 0, tzinfo=timezone.utc)
    ours = stop._sign({"access": "AK", "secret": "SK", "token": ""}, "GET",
                      "https://bss.myhuaweicloud.com/v2/bills/customer-bills/res-fee-records?offset=0&cycle=2026-08",
                      "", when)
    request = SdkRequest(method="GET", schema="https", host="bss.myhuaweicloud.com",
                         resource_path="/v2/bills/customer-bills/res-fee-records",
                         query_params=[("offset", "0"), ("cycle", "2026-08")],
                         header_params={"X-Sdk-Date": when.strftime("%Y%m%dT%H%M%SZ"), "Host": "bss.myhuaweicloud.com"},
                         body="")
    theirs = Signer(BasicCredentials("AK", "SK")).sign(request).header_params["Authorization"]
    assert ours["Authorization"] == theirs


# ---------------------------------------------------------------- the time to live, the idle stop, Lite Servers

def lite_fleet() -> tuple[list[FleetNode], set[str]]:
    """Two ECS servers and two Lite Servers of the stack; Lite Server decoys: one of stack dev2 (prefix
    goldenenv-dev2-), one with no goldenenv name, and one of another project's stack dev (the same prefix, its own
    VPC); ECS decoys of another stack and another project."""
    fleet = [FleetNode("dev-0"), FleetNode("dev-1"), FleetNode("lite-0"), FleetNode("lite-1"),
             FleetNode("lite-dev2", stack="dev2"), FleetNode("notebook", stack=None),
             FleetNode("other-0", stack="dev-old"), FleetNode("theirs-0", project="another-project"),
             FleetNode("lite-theirs", project="another-project")]
    return fleet, {"lite-0", "lite-1", "lite-dev2", "notebook", "lite-theirs"}


def lite_world(**faults) -> HuaweiAdapter:
    fleet, lite = lite_fleet()
    return HuaweiAdapter(fleet, Faults(**faults), lite)


def test_the_lite_servers_are_named_by_the_stacks_prefix():
    """Anchor: the lead's naming, goldenenv-<stack>-<pool>-<n>; the function is told goldenenv-dev-."""
    world = lite_world()
    assert stop_lite.prefix("dev") == "goldenenv-dev-"
    assert {s["name"] for s in world.api.devservers.values()} == {
        "goldenenv-dev-pool-2", "goldenenv-dev-pool-3", "goldenenv-dev2-pool-4", "notebook-5", "goldenenv-dev-pool-8"}


def test_over_the_limit_the_stacks_lite_servers_stop_too_over_every_page():
    world = lite_world(page_size=1)
    outcome = world.invoke("hard-stop")
    assert not outcome.failed, outcome.message
    assert world.touched() == {"dev-0", "dev-1", "lite-0", "lite-1"}
    assert world.running() == {"lite-dev2", "notebook", "other-0", "theirs-0", "lite-theirs"}
    assert {world.api.status(n) for n in ("lite-0", "lite-1")} == {"STOPPED"}


def test_a_lite_server_whose_stop_fails_is_named_and_the_budgets_topic_told():
    world = lite_world(refuse=frozenset({"lite-1"}))
    outcome = world.invoke("hard-stop")
    assert outcome.failed and world.named("lite-1") in outcome.message and "STOP_FAILED" in outcome.message
    assert world.named("lite-1") in world.api.published[-1][1]
    assert world.running() & {"dev-0", "dev-1", "lite-0", "lite-1"} == {"lite-1"}


def test_a_lite_server_still_stopping_when_the_time_runs_out_is_named_for_the_next_run():
    world = lite_world()
    world.api._finish = lambda server_id: None  # ModelArts never finishes the stop within the invocation
    original = world.api._stop_lite

    def stop_slowly(body):
        answer = original(body)
        for server in body["servers"]:
            world.api.operating[server["id"]] = 10_000
        return answer

    world.api._stop_lite = stop_slowly
    outcome = world.invoke("hard-stop")
    assert outcome.failed and "had not finished" in outcome.message
    assert world.named("lite-0") in outcome.message and world.named("lite-1") in outcome.message


@pytest.mark.parametrize("value", [1785470400000, 1785470400])
def test_a_lite_servers_creation_is_read_in_milliseconds_or_seconds(value):
    """1785470400 s since the epoch is 2026-07-31T04:00:00Z."""
    assert stop_lite.created({"create_at": value}) == datetime(2026, 7, 31, 4, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("ttl, stopped", [("24", {"dev-0", "dev-1", "lite-0", "lite-1"}), ("48", set())])
def test_the_time_to_live_counts_from_creation_on_ecs_and_lite_servers(ttl, stopped):
    """Every server was created 30 h before the run."""
    world = lite_world()
    outcome = world.invoke("ttl", **{stop.TTL_HOURS_ENV: ttl})
    assert not outcome.failed, outcome.message
    assert world.touched() == stopped


def test_a_server_whose_creation_cannot_be_read_is_named_and_the_others_still_expire():
    world = lite_world()
    world.api.servers[world.named("dev-1")]["created"] = "2026-07-30 14:00"
    outcome = world.invoke("ttl")
    assert outcome.failed and world.named("dev-1") in outcome.message and "carries no time zone" in outcome.message
    assert world.touched() == {"dev-0", "lite-0", "lite-1"}


def idle_world(points: list, **env) -> tuple[HuaweiAdapter, Invocation]:
    world = lite_world()
    world.api.cpu = {world.named("dev-0"): points, world.named("dev-1"): [50.0] * 6}
    return world, world.invoke("idle", **env)


@pytest.mark.parametrize("points, idle", [
    ([0.0] * 6, True),
    ([4.9] * 6, True),          # 8 vCPUs: min(5 %, half a core = 6.25 %) is 5 %
    ([4.9] * 5 + [5.1], False),
    ([0.0] * 4, False),         # 20 minutes of points do not cover a 30-minute window
    ([], False),                # no data is not idleness
])
def test_a_server_is_idle_when_every_five_minute_cpu_mean_is_under_the_threshold(points, idle):
    world, outcome = idle_world(points)
    assert not outcome.failed, outcome.message
    assert world.touched() == ({"dev-0"} if idle else set())


def test_the_idle_stop_reads_cloud_eye_only_with_its_grant():
    """The stack grants Cloud Eye's read only with an idle time; a function without it is refused by name."""
    assert "ces:metricData:list" not in privilege.stop_policy("goldenenv-stack", "dev")
    assert "ces:metricData:list" in privilege.stop_policy("goldenenv-stack", "dev", idle=True)
    world, outcome = idle_world([0.0] * 6)
    assert world.api.refused_calls == []
    world = lite_world()
    world.api.cpu = {world.named("dev-0"): [0.0] * 6}
    world.api.grant = lambda idle: None  # the policy stays the one without Cloud Eye
    outcome = world.invoke("idle")
    assert outcome.failed and "ces:metricData:list" in outcome.message and world.touched() == set()


def test_a_server_whose_cpu_cannot_be_read_is_named_never_stopped_as_idle():
    world = lite_world()
    world.api.cpu = {world.named("dev-0"): [0.0] * 6}
    world.api.metric_refused = True
    outcome = world.invoke("idle")
    assert outcome.failed and world.named("dev-0") in outcome.message and "CPU cannot be read" in outcome.message
    assert world.touched() == set()


def test_a_server_younger_than_the_idle_time_is_kept():
    world = lite_world()
    world.api.cpu = {world.named("dev-0"): [0.0] * 6}
    world.api.servers[world.named("dev-0")]["created"] = "2026-07-31T19:45:00Z"
    assert not world.invoke("idle").failed and world.touched() == set()


def test_the_stop_functions_settings_name_the_stacks_lite_servers_and_its_lifecycle():
    from goldenenv.clouds.huawei import budget

    args = budget.BudgetGuardArgs(name="fgs", monthly_limit=1000, currency="CNY", hard_stop=True,
                                  region="cn-north-4", tag_key="goldenenv-stack", tag_value="dev",
                                  project_key="project", project_value="llm", agency_name="a", tags={},
                                  ttl_hours=24, idle_minutes=30)
    env = budget.environment(args)
    assert (env["GOLDENENV_DEVSERVER_PREFIX"], env["GOLDENENV_TTL_HOURS"], env["GOLDENENV_IDLE_MINUTES"]) == (
        "goldenenv-dev-", "24", "30")
    plain = budget.environment(budget.BudgetGuardArgs(**{**args.__dict__, "ttl_hours": None, "idle_minutes": None}))
    assert "GOLDENENV_TTL_HOURS" not in plain and "GOLDENENV_IDLE_MINUTES" not in plain


def test_the_chain_finds_a_function_not_told_the_stacks_time_to_live_or_lite_server_prefix():
    from types import SimpleNamespace

    from goldenenv.clouds.huawei import stop_chain

    env = {stop.TAG_VALUE_ENV: "dev", stop.DEVSERVER_PREFIX_ENV: "goldenenv-dev-"}
    assert stop_chain._lifecycle_gaps(env, SimpleNamespace(ttl_hours=None, idle_minutes=None)) == []
    [gap] = stop_chain._lifecycle_gaps(env, SimpleNamespace(ttl_hours=24, idle_minutes=None))
    assert "GOLDENENV_TTL_HOURS unset" in gap and "lifecycle.ttlHours is 24" in gap
    assert stop_chain._prefix_gap(env) is None
    assert "set it to goldenenv-dev-" in stop_chain._prefix_gap({**env, stop.DEVSERVER_PREFIX_ENV: "goldenenv-"})


def test_lite_servers_that_cannot_be_listed_hold_back_no_ecs_stop_and_fail_the_invocation():
    world = lite_world()
    world.api.policy = privilege.stop_policy("goldenenv-stack", "dev").replace("modelarts:devserver:list", "x:y:z")
    world.api.grant = lambda idle: None
    outcome = world.invoke("hard-stop")
    assert outcome.failed and "Lite Servers could not be listed" in outcome.message
    assert "modelarts:devserver:list" in outcome.message and world.touched() == {"dev-0", "dev-1"}


def checked(stack: str, lifecycle: dict, budget: bool = True) -> list:
    """The problems Cloud.check finds in a shipped stack with ``lifecycle`` (and without its budget)."""
    import shipped

    from goldenenv import clouds, stackconfig
    from goldenenv.spec import ConfigError

    values, unknown = stackconfig.namespaced(stackconfig.read_stack_file(shipped.STACKS / f"Pulumi.{stack}.yaml"))
    values["lifecycle"] = {**(values.get("lifecycle") or {}), **lifecycle}
    if not budget:
        values.pop("budget", None)
    try:
        clouds.validate(stackconfig.load(stack, values, unknown))
    except ConfigError as refused:
        return [(p.key, p.message) for p in refused.problems]
    return []


def test_a_stack_with_a_budget_takes_a_time_to_live_and_an_idle_time():
    assert checked("huawei-gpu-dev", {"ttlHours": 24, "idleMinutes": 30}) == []


def test_without_a_budget_there_is_no_function_to_run_them():
    problems = checked("huawei-gpu-dev", {"ttlHours": 24}, budget=False)
    assert [k for k, _ in problems] == ["goldenenv:lifecycle.ttlHours"]
    assert "no budget" in problems[0][1]


def test_the_idle_stop_is_refused_where_lite_servers_cannot_be_judged_idle():
    assert checked("huawei-snt9b-2node", {"ttlHours": 24}) == []
    [(key, message)] = checked("huawei-snt9b-2node", {"idleMinutes": 30})
    assert key == "goldenenv:lifecycle.idleMinutes" and "Lite Server" in message


def test_the_lite_servers_names_and_the_stop_functions_prefix_agree():
    """devserver.py names the servers, stop_lite.py finds them: the same prefix for any stack."""
    from goldenenv.clouds.huawei import devserver

    for stack in ("dev", "huawei-snt9b-2node"):
        assert devserver.server_name(stack, "npu", 0).startswith(stop_lite.prefix(stack))


@pytest.mark.parametrize("removed", ["modelarts:devserver:stop", "ecs:cloudServers:stop"])
def test_a_stop_agency_that_cannot_stop_lite_servers_or_ecs_servers_is_an_error_naming_the_function(removed):
    """huawei-snt9b-2node's Lite Servers are stopped by the function only if its agency's policy allows it."""
    import dataclasses
    import json

    import shipped

    plan, found = shipped.planned("huawei-snt9b-2node")
    assert [f for f in found if f.rule == "budget-stop-chain"] == []
    resources = []
    for r in plan.resources:
        if r.type == privilege.ROLE and r.name.endswith("-budget-identity-policy"):
            document = json.loads(r.props["policy"])
            for statement in document["Statement"]:
                statement["Action"] = [a for a in statement["Action"] if a != removed]
            r = dataclasses.replace(r, props={**r.props, "policy": json.dumps(document)})
        resources.append(r)
    findings = [f for f in shipped.guardrail_findings(plan, resources) if f.rule == "budget-stop-chain"]
    assert findings and all(removed in f.message and "-budget-stop" in f.message for f in findings), findings


def test_a_lite_server_of_another_projects_same_named_stack_is_told_apart_by_its_vpc():
    """Its name has the stack's prefix (goldenenv-dev-); its VPC is not the one the stack's ECS servers sit in."""
    world = lite_world()
    assert world.api.devservers[world.named("lite-theirs")]["name"].startswith(stop_lite.prefix("dev"))
    assert not world.invoke("hard-stop").failed
    assert "lite-theirs" not in world.touched() and "lite-theirs" in world.running()


def test_without_an_ecs_server_to_tell_the_stacks_vpc_no_lite_server_is_stopped_and_the_run_says_so():
    world = lite_world()
    for server in world.api.servers.values():
        server.pop("metadata")
    outcome = world.invoke("hard-stop")
    assert outcome.failed and "tells its VPC" in outcome.message and world.named("lite-0") in outcome.message
    assert world.touched() == {"dev-0", "dev-1"}
