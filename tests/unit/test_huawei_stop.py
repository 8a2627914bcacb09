"""Huawei Cloud's stop function (goldenenv/clouds/huawei/stop.py) on the fake of BSS and ECS (stopfakes/huawei.py):
the month it reads is Beijing's, every page of the bill counts, an unreadable bill or another currency stops the
nodes (fail closed), and only the stack's own servers are stopped."""

from __future__ import annotations

import pytest
from stopfakes import simulated_clock
from stopfakes.huawei import ENV, NOW, FakeHuawei, HuaweiAdapter
from stopfakes.world import Faults, FleetNode

from goldenenv.clouds.huawei import stop


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
