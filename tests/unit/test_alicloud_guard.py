"""The Alibaba Cloud budget guard against API answers in the documented shapes: it alerts each threshold once a
month, stops exactly the stack's running nodes at 100 % with the hard stop on, sums every page of the bill, turns
an unreadable bill into an alert, fails closed on a bill it cannot compare with the limit (NaN, Infinity, text,
missing amounts, another currency), counts a node as stopped only when StopInstances says so for it, and reads
the bill month in Beijing time.

The captures under captures/alicloud_* are assembled, not recorded from an account: BSS OpenAPI
DescribeSplitItemBill bodies in the response model of the alibabacloud-bssopenapi20171214 SDK (Data.Items[] with
PretaxAmount and Currency, Data.NextToken), an OpenAPI error body (RequestId, HostId, Code, Message, Recommend),
and ECS DescribeInstances / DescribeSecurityGroups / StopInstances bodies in ECS's JSON form (lists wrapped as
Instances.Instance[], Tags.Tag[], InstanceResponses.InstanceResponse[]). Three bill pages sum to 244,814.75 CNY.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import urllib.error
import zipfile
from datetime import datetime, timezone
from collections.abc import Callable
from pathlib import Path

import pytest

from goldenenv import spec
from goldenenv.clouds.alicloud import budget, guard

from stopfakes import simulated_clock

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CAPTURES = Path(__file__).parent / "captures"
PROJECT, STACK, REGION = "llm-pretrain", "alicloud-ebmgn8v-2node", "cn-wulanchabu"
NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
PAGES_TOTAL = 244_814.75
MINE_RUNNING = {"i-2zeaaaaaaaaaaaaaaaa1", "i-2zeaaaaaaaaaaaaaaaa2"}
"""The stack's running nodes in alicloud_ecs_DescribeInstances.json; a stopped one of the stack and a running one
of another project's stack of the same name are there too."""


def capture(name: str) -> dict:
    return json.loads((CAPTURES / name).read_text())


def bill_pages() -> dict[str, dict]:
    """The three pages keyed by the NextToken that asks for them ("" = the first)."""
    pages, token = {}, ""
    for n in (1, 2, 3):
        page = capture(f"alicloud_bss_DescribeSplitItemBill_2026-07_page{n}.json")
        pages[token] = page
        token = page["Data"]["NextToken"]
    return pages


class Cloud:
    """BSS and ECS as the guard calls them, answering from the captures; remembers the security group's tags.
    `cycles` answers the bill by BillingCycle ({cycle: pages}); `stop` answers StopInstances (params -> body)."""

    def __init__(self, pages: dict[str, dict] | None = None, bill_error: dict | None = None,
                 cycles: dict[str, dict[str, dict]] | None = None, stop=None, fleet: list[dict] | None = None):
        """`fleet`: instances (DescribeInstances' Instance shape) that StopInstances stops as ECS does, refusing
        economical mode on a type with local disks (ecs_refusal); without it the captures answer."""
        self.fleet = fleet
        self.pages = bill_pages() if pages is None else pages
        self.bill_error = bill_error
        self.cycles = cycles
        self.stop = stop
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.memory_tag: str | None = None
        self.alerts: list[tuple[str, str]] = []

    def bill(self, action: str, params: dict[str, str]) -> dict:
        self.calls.append((action, dict(params)))
        if self.bill_error:
            raise guard.ApiError(action, self.bill_error["Code"], self.bill_error["Message"])
        pages = self.pages if self.cycles is None else self.cycles[params["BillingCycle"]]
        return pages[params.get("NextToken", "")]

    def ecs(self, action: str, params: dict[str, str]) -> dict:
        self.calls.append((action, dict(params)))
        if action == "DescribeInstances":
            if self.fleet is not None:
                return {"RequestId": "describe", "TotalCount": len(self.fleet), "PageSize": 100, "PageNumber": 1,
                        "NextToken": "", "Instances": {"Instance": self.fleet}}
            return capture("alicloud_ecs_DescribeInstances.json")
        if action == "DescribeSecurityGroups":
            answer = capture("alicloud_ecs_DescribeSecurityGroups.json")
            if self.memory_tag is not None:
                for group in answer["SecurityGroups"]["SecurityGroup"]:
                    group["Tags"]["Tag"].append({"TagKey": guard.STATE_TAG_KEY, "TagValue": self.memory_tag})
            return answer
        if action == "TagResources":
            self.memory_tag = params["Tag.1.Value"]
            return {"RequestId": "tag"}
        if action == "StopInstances":
            if self.stop:
                return self.stop(params)
            if self.fleet is None:
                return capture("alicloud_ecs_StopInstances.json")
            return self.stop_fleet(params)
        raise AssertionError(f"unexpected call {action}")

    def stop_fleet(self, params: dict[str, str]) -> dict:
        found = {i["InstanceId"]: i for i in self.fleet or []}
        answers = []
        for instance_id in stop_ids(params):
            instance = found[instance_id]
            refusal = ecs_refusal(instance, params.get("StoppedMode", ""))
            if refusal:
                answers.append(refused(instance_id, *refusal))
                continue
            answers.append(stopping(instance_id))
            instance["Status"] = "Stopping"
        return stop_answer(*answers)

    def notify(self, subject: str, body: str) -> None:
        self.alerts.append((subject, body))

    def of(self, action: str) -> list[dict[str, str]]:
        return [params for called, params in self.calls if called == action]


def budget_of(limit: float, hard_stop: bool = True, thresholds=(50, 80, 100)) -> guard.Budget:
    return guard.Budget(project=PROJECT, stack=STACK, region=REGION, monthly_limit=limit, currency="CNY",
                        thresholds=tuple(thresholds), hard_stop=hard_stop)


def run(cloud: Cloud, limit: float, **kw) -> guard.Report:
    """One guard run on simulated time: its retries and watches never really wait."""
    return guard.run(budget_of(limit, **{k: v for k, v in kw.items() if k in ("hard_stop", "thresholds")}),
                     bill=cloud.bill, ecs=cloud.ecs, notify=cloud.notify, now=kw.get("now", NOW),
                     clock=kw.get("clock") or simulated_clock(guard.TIMEOUT_SECONDS - guard.MARGIN_SECONDS))


UNDER_BUDGET = "alicloud_bss_DescribeSplitItemBill_2026-07_under_budget.json"
"""One page, two CNY items: 20,000.00 (ECS) and 1.50 (OSS)."""


def under_budget_page(amount: str | None = None, currencies: tuple | None = None) -> dict:
    """The under-budget page as it comes off the wire with the ECS item's `"PretaxAmount": 20000.0` written
    instead as `amount` (JSON text: NaN and Infinity are the tokens Python's json reads as floats; None drops
    the field), and the items' Currency replaced by `currencies` (None in it drops the field)."""
    text = (CAPTURES / UNDER_BUDGET).read_text()
    if amount is not None:
        assert text.count('"PretaxAmount": 20000.0,') == 1
        text = text.replace('"PretaxAmount": 20000.0,', f'"PretaxAmount": {amount},')
    page = json.loads(text)
    if amount is None and currencies is None:
        del page["Data"]["Items"][0]["PretaxAmount"]
    for item, currency in zip(page["Data"]["Items"], currencies or (), strict=False):
        if currency is None:
            del item["Currency"]
        else:
            item["Currency"] = currency
    return page


def stop_ids(params: dict[str, str]) -> list[str]:
    numbered = {int(k.removeprefix("InstanceId.")): v for k, v in params.items() if k.startswith("InstanceId.")}
    return [numbered[n] for n in sorted(numbered)]


def stopping(instance: str) -> dict:
    """An InstanceResponse for an instance StopInstances stopped (ECS's documented shape)."""
    return {"InstanceId": instance, "Code": "200", "Message": "success", "PreviousStatus": "Running",
            "CurrentStatus": "Stopping"}


def refused(instance: str, code: str = "IncorrectInstanceStatus",
            message: str = "The current status of the resource does not support this operation.") -> dict:
    return {"InstanceId": instance, "Code": code, "Message": message, "PreviousStatus": "Running",
            "CurrentStatus": "Running"}


def ecs_refusal(instance: dict, stopped_mode: str) -> tuple[str, str] | None:
    """Economical mode (StoppedMode=StopCharging) is not for "instance families with local SSDs (i series), all big
    data instance families (d series)" (Alibaba Cloud ECS, "Economical mode", Requirements): a stop in that mode of
    a type the catalog gives local disks is refused. The code and message are this fake's: Alibaba's exact answer
    is not captured."""
    from goldenenv import catalog

    local = catalog.instance_type("alicloud", instance["InstanceType"]).local_nvme_count
    if stopped_mode == "StopCharging" and local:
        return ("UnsupportedOperation", f"{instance['InstanceType']} has local disks: economical mode "
                                        "(StopCharging) is not supported")
    return None


def stop_answer(*responses: dict) -> dict:
    return {"RequestId": "473469C7-AA6F-4DC5-B3DB-A3DC0DE30004",
            "InstanceResponses": {"InstanceResponse": list(responses)}}


# ---------------------------------------------------------------- shipped alone, speaking the program's tags

def test_tag_keys_are_the_ones_the_program_uses():
    assert guard.STACK_TAG_KEY == spec.STACK_TAG_KEY
    resolved = spec.Tags(project="p", owner="o", cost_center="c").resolved("dev")
    assert resolved[guard.PROJECT_TAG_KEY] == "p" and resolved[guard.STACK_TAG_KEY] == "dev"


STANDALONE = """
import sys
from datetime import datetime, timezone
import guard
assert "goldenenv" not in sys.modules
def ecs(action, params):
    if action == "DescribeInstances":
        return {"Instances": {"Instance": [{"InstanceId": "i-1", "Status": "Running", "Tags": {"Tag": [
            {"TagKey": guard.STACK_TAG_KEY, "TagValue": "s"}, {"TagKey": guard.PROJECT_TAG_KEY, "TagValue": "p"}]}}]}}
    if action == "StopInstances":
        return {"InstanceResponses": {"InstanceResponse": [{"InstanceId": "i-1", "Code": "200"}]}}
    return {"SecurityGroups": {"SecurityGroup": []}}
bill = lambda action, params: {"Data": {"Items": [{"PretaxAmount": 150, "Currency": "CNY"}]}}
budget = guard.Budget("p", "s", "cn-beijing", 100.0, "CNY", (100,), True)
report = guard.run(budget, bill=bill, ecs=ecs, notify=lambda subject, body: None,
                   now=datetime(2026, 7, 31, 16, tzinfo=timezone.utc))
print(report.cycle, report.stopped)
"""


def test_the_guards_package_imports_and_runs_on_its_own(tmp_path):
    """The deployed zip (guard.py and the stop core beside it), unpacked with nothing else on the path,
    site-packages included: it imports the standard library and the core only, and stops a node over the limit."""
    import subprocess

    zipfile.ZipFile(io.BytesIO(budget.code_zip())).extractall(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["guard.py", "stopcore.py"]
    done = subprocess.run([sys.executable, "-S", "-I", "-c", f"import sys; sys.path[:0] = [{str(tmp_path)!r}]\n"
                           + STANDALONE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2026-08 ['i-1']", "August already in Beijing, and the node stopped"


def test_rpc_signature_matches_alibaba_clouds_documented_example():
    # ECS API reference, "Request signatures": DescribeRegions signed with AccessKey testid / testsecret
    params = {"AccessKeyId": "testid", "Action": "DescribeRegions", "Format": "XML", "SignatureMethod": "HMAC-SHA1",
              "SignatureNonce": "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf", "SignatureVersion": "1.0",
              "Timestamp": "2016-02-23T12:46:24Z", "Version": "2014-05-26"}
    assert guard.rpc_signature(params, "testsecret") == "OLeaidS1JvxuMvnyHOwuJ+uX5qY="


def test_signed_url_carries_the_sts_token_and_encodes_values():
    url = guard.signed_url("business.aliyuncs.com", guard.BSS_VERSION, "DescribeSplitItemBill",
                           {"TagFilter.1.TagKey": "goldenenv:stack", "TagFilter.1.TagValues.1": "a b*c~"},
                           guard.Credentials("id", "secret", "tok+en/="), "2026-07-20T08:00:00Z", "nonce")
    assert url.startswith("https://business.aliyuncs.com/?")
    assert "SecurityToken=tok%2Ben%2F%3D" in url and "&Signature=" in url
    assert "TagFilter.1.TagValues.1=a%20b%2Ac~" in url and "TagFilter.1.TagKey=goldenenv%3Astack" in url


def test_an_api_error_body_becomes_an_api_error_with_its_code(monkeypatch):
    body = json.dumps(capture("alicloud_bss_error_NotAuthorized.json")).encode()

    def refuse(url, timeout):
        raise urllib.error.HTTPError(url, 403, "Forbidden", {}, io.BytesIO(body))

    monkeypatch.setattr(guard.urllib.request, "urlopen", refuse)
    call = guard.rpc_client("business.aliyuncs.com", guard.BSS_VERSION, guard.Credentials("id", "secret"))
    with pytest.raises(guard.ApiError, match="NotAuthorized") as raised:
        call("DescribeSplitItemBill", {"BillingCycle": "2026-07"})
    assert raised.value.code == "NotAuthorized"


# ---------------------------------------------------------------- the bill

def test_every_page_of_the_bill_is_read_and_summed():
    cloud = Cloud()
    spend, currencies = guard.month_spend(cloud.bill, STACK, "2026-07")
    assert spend == pytest.approx(PAGES_TOTAL) and currencies == {"CNY"}
    requests = cloud.of("DescribeSplitItemBill")
    assert [r.get("NextToken") for r in requests] == [None, "CAESEgoQCg4KBnNwbGl0ARIECgIIAQ==",
                                                      "CAESEgoQCg4KBnNwbGl0ARIECgIIAg=="]
    assert all(r["BillingCycle"] == "2026-07" and r["MaxResults"] == "300" for r in requests)
    assert all(r["TagFilter.1.TagKey"] == "goldenenv:stack" and r["TagFilter.1.TagValues.1"] == STACK
               for r in requests)


def test_under_budget_nothing_happens():
    cloud = Cloud(pages={"": capture("alicloud_bss_DescribeSplitItemBill_2026-07_under_budget.json")})
    report = run(cloud, limit=400_000)
    assert report.spend == pytest.approx(20_001.5) and report.percent == pytest.approx(5.0, abs=0.01)
    assert cloud.alerts == [] and report.alerts == [] and report.failed == []
    assert cloud.of("StopInstances") == [] and cloud.of("TagResources") == []


@pytest.mark.parametrize("limit,crossed", [(400_000, [50]), (300_000, [50, 80])])
def test_each_threshold_crossed_alerts_once_then_never_again_that_month(limit, crossed):
    cloud = Cloud()
    first = run(cloud, limit)
    assert len(cloud.alerts) == len(crossed) == len(first.alerts)
    for level, (subject, body) in zip(crossed, cloud.alerts, strict=True):
        assert f"passed {level} %" in subject and STACK in subject and "CNY" in subject
        assert f"{PAGES_TOTAL:,.2f}" in body
    assert cloud.memory_tag == f"2026-07:{','.join(map(str, crossed))}"
    assert cloud.of("StopInstances") == []

    again = run(cloud, limit)  # the next run, 15 minutes later: same spend, nothing new
    assert again.alerts == [] and len(cloud.alerts) == len(crossed)
    assert len(cloud.of("TagResources")) == 1


def test_a_new_month_alerts_again():
    cloud = Cloud()
    run(cloud, 400_000)
    run(cloud, 400_000, now=datetime(2026, 8, 2, tzinfo=timezone.utc))
    assert [s for s, _ in cloud.alerts] == [cloud.alerts[0][0]] * 2
    assert cloud.memory_tag == "2026-08:50"


def test_at_100_percent_the_hard_stop_stops_exactly_the_stacks_running_nodes():
    cloud = Cloud()
    report = run(cloud, limit=240_000)  # 102 %
    [stop] = cloud.of("StopInstances")
    assert {v for k, v in stop.items() if k.startswith("InstanceId.")} == MINE_RUNNING
    assert stop["StoppedMode"] == "StopCharging" and stop["RegionId"] == REGION
    assert set(report.stopped) == MINE_RUNNING and report.failed == []
    [listing] = cloud.of("DescribeInstances")
    assert (listing["Tag.1.Key"], listing["Tag.1.Value"]) == ("goldenenv:stack", STACK)
    assert (listing["Tag.2.Key"], listing["Tag.2.Value"]) == ("project", PROJECT)
    subjects = [s for s, _ in cloud.alerts]
    assert [s for s in subjects if "passed" in s] == [f"goldenenv budget: {STACK} passed {t} % of 240,000.00 CNY"
                                                      for t in (50, 80, 100)]
    assert any("hard stop" in s for s in subjects)


def test_without_the_hard_stop_nothing_is_stopped():
    cloud = Cloud()
    report = run(cloud, limit=240_000, hard_stop=False)
    assert cloud.of("StopInstances") == [] and cloud.of("DescribeInstances") == [] and report.stopped == []
    assert len(report.alerts) == 3


def test_stops_go_in_calls_of_at_most_100_ids():
    instances = [{"InstanceId": f"i-{n:020d}", "Status": "Running",
                  "Tags": {"Tag": [{"TagKey": "goldenenv:stack", "TagValue": STACK},
                                   {"TagKey": "project", "TagValue": PROJECT}]}} for n in range(230)]
    cloud = Cloud()
    cloud.ecs = lambda action, params: (cloud.calls.append((action, dict(params))) or (
        {"Instances": {"Instance": instances}} if action == "DescribeInstances" else
        {"SecurityGroups": {"SecurityGroup": []}} if action == "DescribeSecurityGroups" else
        stop_answer(*(stopping(i) for i in stop_ids(params))) if action == "StopInstances" else {}))
    report = run(cloud, limit=240_000)
    sizes = [sum(k.startswith("InstanceId.") for k in p) for p in cloud.of("StopInstances")]
    assert sizes == [100, 100, 30] and len(report.stopped) == 230


def test_an_unreadable_bill_is_an_alert_never_a_silent_pass():
    cloud = Cloud(bill_error=capture("alicloud_bss_error_NotAuthorized.json"))
    report = run(cloud, limit=240_000)
    [(subject, body)] = cloud.alerts
    assert "cannot read the bill" in subject and "NotAuthorized" in body
    assert report.spend is None and any("cannot read the bill" in f for f in report.failed)
    assert cloud.of("StopInstances") == []  # no spend known: no stop
    run(cloud, limit=240_000)  # the same day: logged and failed again, mailed once a day
    assert len(cloud.alerts) == 1
    run(cloud, limit=240_000, now=datetime(2026, 7, 21, tzinfo=timezone.utc))
    assert len(cloud.alerts) == 2


def test_a_failed_memory_write_is_reported_and_the_alert_still_goes_out():
    cloud = Cloud()
    answer = cloud.ecs

    def no_tagging(action, params):
        if action == "TagResources":
            raise guard.ApiError(action, "Forbidden.RAM", "not allowed")
        return answer(action, params)

    cloud.ecs = no_tagging
    report = run(cloud, limit=400_000)
    assert len(cloud.alerts) == 1 and any("may repeat" in f for f in report.failed)


# ---------------------------------------------------------------- fails closed on a bill it cannot compare

UNTRUSTED = "the bill cannot be trusted"


def trusted_alert(cloud: Cloud) -> str:
    """The body of the one alert that the bill cannot be trusted."""
    bodies = [body for subject, body in cloud.alerts if UNTRUSTED in subject]
    assert len(bodies) == 1, f"no single '{UNTRUSTED}' alert among {[subject for subject, _ in cloud.alerts]}"
    return bodies[0]


@pytest.mark.parametrize("hard_stop", [True, False])
def test_a_nan_bill_alerts_and_with_the_hard_stop_stops_the_nodes(hard_stop):
    cloud = Cloud(pages={"": under_budget_page("NaN")})
    report = run(cloud, limit=400_000, hard_stop=hard_stop)
    body = trusted_alert(cloud)
    assert "PretaxAmount is nan, not a finite amount" in body and "i-2zeaaaaaaaaaaaaaaaa1" in body
    assert any("not a finite amount" in f for f in report.failed)  # the invocation fails
    assert not any("passed" in subject for subject, _ in cloud.alerts)
    if hard_stop:
        [stop] = cloud.of("StopInstances")
        assert set(stop_ids(stop)) == set(report.stopped) == MINE_RUNNING
        assert "treated as over the limit" in " ".join(report.failed) and "stops every running node" in body
        assert any("hard stop of" in subject for subject, _ in cloud.alerts)
    else:
        assert cloud.of("StopInstances") == [] and report.stopped == []


@pytest.mark.parametrize("amount", ["Infinity", "-Infinity", '"NaN"', '"Infinity"', "1e999"])
def test_an_infinite_bill_is_a_reason_in_an_alert_not_a_threshold_passed(amount):
    cloud = Cloud(pages={"": under_budget_page(amount)})
    report = run(cloud, limit=400_000)
    assert "not a finite amount" in trusted_alert(cloud)
    assert not any("passed" in subject for subject, _ in cloud.alerts) and report.percent is None
    assert set(report.stopped) == MINE_RUNNING and report.failed


@pytest.mark.parametrize("amount,reason", [('"N/A"', "PretaxAmount 'N/A' is not a number"),
                                           ('""', "PretaxAmount '' is not a number"),
                                           ("null", "PretaxAmount is missing"),
                                           (None, "has no PretaxAmount")])
def test_a_text_or_missing_amount_fails_closed(amount, reason):
    cloud = Cloud(pages={"": under_budget_page(amount)})
    report = run(cloud, limit=400_000)
    assert reason in trusted_alert(cloud) and any(reason in f for f in report.failed)
    assert set(report.stopped) == MINE_RUNNING
    run(cloud, limit=400_000)  # 15 minutes later: stopped again, alerted once a day
    assert len(cloud.of("StopInstances")) == 2 and len([s for s, _ in cloud.alerts if UNTRUSTED in s]) == 1


def test_an_answer_without_data_fails_closed():
    cloud = Cloud(pages={"": {"Code": "Success", "Message": "Successful!", "RequestId": "8A1B", "Success": True}})
    report = run(cloud, limit=400_000)
    assert "has no Data" in trusted_alert(cloud) and set(report.stopped) == MINE_RUNNING


@pytest.mark.parametrize("currencies,named", [(("USD", "USD"), "USD"), (("CNY", "USD"), "USD"),
                                              (("CNY", None), "no currency given")])
@pytest.mark.parametrize("hard_stop", [True, False])
def test_a_bill_in_another_currency_than_the_limit_alerts_the_reason_and_stops_with_the_hard_stop(
        currencies, named, hard_stop):
    cloud = Cloud(pages={"": under_budget_page(currencies=currencies)})  # 20,001.50: 5 % as plain numbers
    report = run(cloud, limit=400_000, hard_stop=hard_stop)
    body = trusted_alert(cloud)
    assert f"the bill is in {named}, the limit in CNY" in body and "20,001.50" in body
    assert any(f"the bill is in {named}" in f for f in report.failed)
    assert report.spend == pytest.approx(20_001.5) and report.percent is None
    assert not any("passed" in subject for subject, _ in cloud.alerts)
    if hard_stop:
        assert set(report.stopped) == MINE_RUNNING and len(cloud.of("StopInstances")) == 1
    else:
        assert cloud.of("StopInstances") == [] and report.stopped == []
    assert cloud.memory_tag == "2026-07:;c2026-07-20"  # nothing alerted as a threshold, the problem once today


# ---------------------------------------------------------------- a node is stopped when the answer says so

FIRST, SECOND = sorted(MINE_RUNNING)


@pytest.mark.parametrize("answer", [
    lambda ids: stop_answer(*(stopping(i) for i in ids if i != SECOND)),  # the answer omits one instance
    lambda ids: stop_answer(*(stopping(i) if i != SECOND else {"InstanceId": i, "Message": "?"} for i in ids)),
], ids=["omitted", "no-code"])
def test_an_instance_left_out_of_the_stop_answer_is_not_stopped_but_retried_and_reported(answer):
    cloud = Cloud(stop=lambda params: answer(stop_ids(params)))
    report = run(cloud, limit=240_000)
    assert report.stopped == [FIRST]
    assert [stop_ids(p) for p in cloud.of("StopInstances")] == [[FIRST, SECOND], [SECOND]], \
        "retried alone, and the node already stopped is not sent again"
    [failure] = [f for f in report.failed if "hard stop of" in f]
    assert SECOND in failure and "not stopped" in failure
    [(subject, body)] = [(s, b) for s, b in cloud.alerts if "hard stop" in s]
    assert subject.endswith("incomplete") and f"stopped 1 node(s): {FIRST}" in body and SECOND in body

    run(cloud, limit=240_000)  # the next scheduled run finds it still Running and tries again
    assert SECOND in stop_ids(cloud.of("StopInstances")[3])


@pytest.mark.parametrize("empty", [{"RequestId": "473469C7-AA6F-4DC5-B3DB-A3DC0DE30005"},
                                   stop_answer(), {"RequestId": "r", "InstanceResponses": {}}])
def test_an_empty_stop_answer_stops_nothing(empty):
    cloud = Cloud(stop=lambda params: empty)
    report = run(cloud, limit=240_000)
    assert report.stopped == [] and len(cloud.of("StopInstances")) == 3
    assert {i for i in MINE_RUNNING if any(i in f and "not in the StopInstances answer" in f
                                           for f in report.failed)} == MINE_RUNNING
    [(subject, body)] = [(s, b) for s, b in cloud.alerts if "hard stop" in s]
    assert "incomplete" in subject and "stopped 0 node(s)" in body


@pytest.mark.parametrize("first", [lambda ids: stop_answer(stopping(FIRST)),
                                   lambda ids: stop_answer(stopping(FIRST), refused(SECOND))],
                         ids=["omitted", "refused"])
def test_a_node_the_first_answer_did_not_stop_is_stopped_by_the_retry_in_the_same_run(first):
    answers = iter([first, lambda ids: stop_answer(*(stopping(i) for i in ids))])
    cloud = Cloud(stop=lambda params: next(answers)(stop_ids(params)))
    report = run(cloud, limit=240_000)
    assert [stop_ids(p) for p in cloud.of("StopInstances")] == [[FIRST, SECOND], [SECOND]]
    assert sorted(report.stopped) == [FIRST, SECOND] and report.failed == []


# ---------------------------------------------------------------- throttling, and nodes still starting

TRANSIENT = [("Throttling", 400), ("Throttling.User", 400), ("Throttling.Api", 400), ("ServiceUnavailable", 503),
             ("InternalError", 500), ("SomethingNew", 503), ("URLError", 0)]
"""Codes and HTTP statuses Alibaba's documentation gives a throttled or failing call (ECS "API throttling",
https://www.alibabacloud.com/help/doc-detail/437902.htm; OpenAPI "Throttling and quota management"; ECS "Response
results", https://www.alibabacloud.com/help/doc-detail/25932.htm), an unknown code with HTTP 503, and no answer."""


def failing_first(answer, actions: set[str], code: str, status: int, times: int = 1):
    """``answer`` (a guard.Call), except that the first ``times`` calls of each of ``actions`` fail with code."""
    left = {action: times for action in actions}

    def call(action, params):
        if left.get(action):
            left[action] -= 1
            raise guard.ApiError(action, code, "Request was denied.", status=status)
        return answer(action, params)

    return call


@pytest.mark.parametrize("code,status", TRANSIENT)
def test_a_throttled_or_failing_call_is_retried_and_the_hard_stop_still_happens(code, status):
    cloud = Cloud()
    cloud.bill = failing_first(cloud.bill, {"DescribeSplitItemBill"}, code, status, times=3)
    cloud.ecs = failing_first(cloud.ecs, {"DescribeInstances", "StopInstances", "DescribeSecurityGroups",
                                          "TagResources"}, code, status, times=2)
    report = run(cloud, limit=240_000)
    assert set(report.stopped) == MINE_RUNNING and report.failed == []
    assert report.spend == pytest.approx(PAGES_TOTAL) and cloud.memory_tag == "2026-07:50,80,100"


def test_a_refused_call_is_not_retried_and_a_listing_never_read_is_never_no_nodes():
    cloud = Cloud()
    cloud.ecs = failing_first(cloud.ecs, {"DescribeInstances"}, "Forbidden.RAM", 403, times=1)
    report = run(cloud, limit=240_000)
    assert cloud.of("StopInstances") == [] and report.stopped == []
    [failure] = [f for f in report.failed if "hard stop" in f]
    assert "cannot list the stack's nodes" in failure and "Forbidden.RAM" in failure
    assert not any("hard stop" in subject for subject, _ in cloud.alerts), "nothing stopped: the failed run alarms"


def test_a_bill_throttled_for_the_whole_run_is_alerted_and_stops_nothing():
    """No answer is not a wrong answer: the guard fails closed on a bill it can read and not trust, not on one
    that never came (that fails the invocation, which alarms)."""
    cloud = Cloud()
    cloud.bill = failing_first(cloud.bill, {"DescribeSplitItemBill"}, "Throttling.User", 400, times=10_000)
    report = run(cloud, limit=240_000)
    assert report.spend is None and cloud.of("StopInstances") == []
    assert any("cannot read the bill" in f and "Throttling.User" in f for f in report.failed)
    assert any("cannot read the bill" in subject for subject, _ in cloud.alerts)


def test_rpc_client_tells_a_throttled_or_lost_call_from_a_refused_one(monkeypatch):
    answers = iter([urllib.error.HTTPError("u", 503, "Service Unavailable", {}, io.BytesIO(b"{}")),
                    urllib.error.URLError("timed out"),
                    urllib.error.HTTPError("u", 400, "Bad Request", {}, io.BytesIO(json.dumps(
                        {"Code": "Throttling.User", "Message": "Request was denied due to user flow control."}
                    ).encode())),
                    urllib.error.HTTPError("u", 403, "Forbidden", {}, io.BytesIO(json.dumps(
                        capture("alicloud_bss_error_NotAuthorized.json")).encode()))])

    def answer(url, timeout):
        raise next(answers)

    monkeypatch.setattr(guard.urllib.request, "urlopen", answer)
    call = guard.rpc_client("ecs.cn-wulanchabu.aliyuncs.com", guard.ECS_VERSION, guard.Credentials("id", "secret"))
    verdicts = []
    for _ in range(4):
        with pytest.raises(guard.ApiError) as raised:
            call("DescribeInstances", {})
        verdicts.append((raised.value.code, guard.transient(raised.value)))
    assert verdicts == [("503", True), ("URLError", True), ("Throttling.User", True), ("NotAuthorized", False)]


def starting_fleet(statuses: dict[str, str], runs_after: int) -> tuple[list[dict], Callable]:
    """Instances of the stack in ``statuses``; those not Running become Running once listed ``runs_after`` times."""
    fleet = [{"InstanceId": i, "Status": status, "InstanceType": "ecs.ebmgn8v.48xlarge",
              "Tags": {"Tag": [{"TagKey": guard.STACK_TAG_KEY, "TagValue": STACK},
                               {"TagKey": guard.PROJECT_TAG_KEY, "TagValue": PROJECT}]}}
             for i, status in statuses.items()]
    seen = {i: 0 for i in statuses}

    def listed(answer: dict) -> dict:
        for instance in answer["Instances"]["Instance"]:
            seen[instance["InstanceId"]] += 1
            if instance["Status"] in ("Starting", "Pending") and seen[instance["InstanceId"]] > runs_after:
                instance["Status"] = "Running"
        return answer

    return fleet, listed


def refusing_until_running(fleet: list[dict]) -> Callable:
    """StopInstances as ECS answers it: a node not Running is refused with IncorrectInstanceStatus."""
    def stop(params):
        answers = []
        for instance_id in stop_ids(params):
            [instance] = [i for i in fleet if i["InstanceId"] == instance_id]
            if instance["Status"] != "Running":
                answers.append(refused(instance_id) | {"PreviousStatus": instance["Status"],
                                                       "CurrentStatus": instance["Status"]})
            else:
                instance["Status"] = "Stopping"
                answers.append(stopping(instance_id))
        return stop_answer(*answers)

    return stop


def test_nodes_starting_or_pending_at_the_hard_stop_are_stopped_once_they_run_in_the_same_run():
    fleet, listed = starting_fleet({"i-run": "Running", "i-starting": "Starting", "i-pending": "Pending"}, 2)
    cloud = Cloud(fleet=fleet)
    describe = cloud.ecs
    cloud.ecs = lambda action, params: (listed(describe(action, params)) if action == "DescribeInstances"
                                        else describe(action, params))
    cloud.stop = refusing_until_running(fleet)
    report = run(cloud, limit=240_000)
    assert sorted(report.stopped) == ["i-pending", "i-run", "i-starting"] and report.failed == []
    assert {i["InstanceId"]: i["Status"] for i in fleet} == dict.fromkeys(["i-run", "i-starting", "i-pending"],
                                                                          "Stopping")


def test_a_node_still_starting_when_the_run_ends_is_named_and_the_run_fails():
    fleet, listed = starting_fleet({"i-run": "Running", "i-stuck": "Starting"}, 10_000)
    cloud = Cloud(fleet=fleet)
    describe = cloud.ecs
    cloud.ecs = lambda action, params: (listed(describe(action, params)) if action == "DescribeInstances"
                                        else describe(action, params))
    cloud.stop = refusing_until_running(fleet)
    report = run(cloud, limit=240_000)
    assert report.stopped == ["i-run"]
    [failure] = [f for f in report.failed if "i-stuck" in f]
    assert "still starting" in failure and "next run" in failure
    [(subject, body)] = [(s, b) for s, b in cloud.alerts if "hard stop" in s]
    assert subject.endswith("incomplete") and "i-stuck" in body


# ---------------------------------------------------------------- the bill month is Beijing time

def test_the_bill_month_is_beijing_time_on_both_sides_of_midnight():
    for now, cycle in [(datetime(2026, 12, 31, 23, 30, tzinfo=timezone.utc), "2027-01"),  # 07:30 on Jan 1
                       (datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc), "2026-12"),     # 11:00 on Dec 1
                       (datetime(2026, 11, 30, 16, 0, tzinfo=timezone.utc), "2026-12"),   # 00:00 on Dec 1
                       (datetime(2026, 11, 30, 15, 59, 59, tzinfo=timezone.utc), "2026-11")]:
        cloud = Cloud(pages={"": capture(UNDER_BUDGET)})
        report = run(cloud, limit=400_000, now=now)
        assert report.cycle == cycle, now
        assert {p["BillingCycle"] for p in cloud.of("DescribeSplitItemBill")} == {cycle}, now


def test_before_eight_beijing_on_the_first_the_guard_reads_the_new_months_bill():
    july_over, august_small = bill_pages(), {"": capture(UNDER_BUDGET)}  # 102 % and 8 % of 240,000
    cloud = Cloud(cycles={"2026-07": july_over, "2026-08": august_small})
    report = run(cloud, limit=240_000, now=datetime(2026, 7, 31, 20, 0, tzinfo=timezone.utc))  # 04:00 Aug 1
    assert report.cycle == "2026-08" and report.spend == pytest.approx(20_001.5)
    assert cloud.of("StopInstances") == [] and cloud.alerts == []

    report = run(cloud, limit=240_000, now=datetime(2026, 7, 31, 15, 30, tzinfo=timezone.utc))  # 23:30 Jul 31
    assert report.cycle == "2026-07" and set(report.stopped) == MINE_RUNNING


# ---------------------------------------------------------------- the Function Compute entry point

class Context:
    class credentials:  # noqa: N801 - the shape FC passes: context.credentials.access_key_id ...
        access_key_id, access_key_secret, security_token = "STS.id", "secret", "token"


def test_handler_reads_its_environment_and_fails_the_invocation_on_a_problem(monkeypatch, capsys):
    cloud = Cloud(bill_error=capture("alicloud_bss_error_NotAuthorized.json"))
    mailed: list[dict] = []
    clients = {"business.aliyuncs.com": cloud.bill, f"ecs.{REGION}.aliyuncs.com": cloud.ecs,
               "dm.aliyuncs.com": lambda action, params: mailed.append(params) or {}}
    seen: list[guard.Credentials] = []

    def client(endpoint, version, credentials, timeout=30.0):
        seen.append(credentials)
        return clients[endpoint]

    monkeypatch.setattr(guard, "rpc_client", client)
    args = budget.BudgetGuardArgs(project=PROJECT, stack=STACK, monthly_limit=240_000, currency="CNY",
                                  thresholds=[50, 80, 100], emails=["a@example.com", "b@example.com"],
                                  hard_stop=True, region=REGION, tags={}, alert_sender="guard@mail.example.com")
    for key, value in budget.guard_environment(args).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeError, match="1 problem"):
        guard.handler(b'{"triggerName": "goldenenv-budget-guard"}', Context())
    assert {c.security_token for c in seen} == {"token"}
    [mail] = mailed
    assert mail["ToAddress"] == "a@example.com,b@example.com" and mail["AccountName"] == "guard@mail.example.com"
    assert "cannot read the bill" in mail["Subject"] and "NotAuthorized" in capsys.readouterr().out


def test_handler_succeeds_when_all_is_well_and_flags_a_bill_in_another_currency(monkeypatch, capsys):
    cloud = Cloud()
    clients = {"business.aliyuncs.com": cloud.bill, "business.ap-southeast-1.aliyuncs.com": cloud.bill,
               f"ecs.{REGION}.aliyuncs.com": cloud.ecs, "dm.aliyuncs.com": lambda a, p: {},
               "dm.ap-southeast-1.aliyuncs.com": lambda a, p: {}}
    monkeypatch.setattr(guard, "rpc_client", lambda endpoint, version, credentials, timeout=30.0: clients[endpoint])
    for currency in ("CNY", "USD"):
        args = budget.BudgetGuardArgs(project=PROJECT, stack=STACK, monthly_limit=1_000_000, currency=currency,
                                      thresholds=[50], emails=[], hard_stop=False, region=REGION, tags={})
        for key, value in budget.guard_environment(args).items():
            monkeypatch.setenv(key, value)
        if currency == "CNY":
            result = json.loads(guard.handler(b"{}", Context()))
            assert result["alerts"] == [] and result["spend"] == pytest.approx(PAGES_TOTAL)
        else:  # the captured bill is in CNY: a USD limit is a configuration error, alerted and reported; with
            # no sender configured the alert only reaches the output, which is the second problem
            with pytest.raises(RuntimeError, match="2 problem"):
                guard.handler(b"{}", Context())
            out = capsys.readouterr().out
            assert "ALERT goldenenv budget guard of" in out and "the bill is in CNY, the limit in USD" in out


def test_the_sites_endpoints_follow_the_billing_currency():
    assert budget.bss_endpoint("CNY") == "business.aliyuncs.com"
    assert budget.bss_endpoint("USD") == "business.ap-southeast-1.aliyuncs.com"
    assert budget.direct_mail_endpoint("USD") == "dm.ap-southeast-1.aliyuncs.com"


# ---------------------------------------------------------------- the BudgetGuard component under mocks

class MockCloud:
    """The offline plan's answers for the guard's resources (budget.plan_mock) and a RAM role's ARN."""

    @staticmethod
    def plan_mock(args):
        if args.typ == "alicloud:ram/role:Role":
            return None, {"arn": f"acs:ram::0000000000000000:role/{args.inputs['roleName']}"}
        return budget.plan_mock(args)

    @staticmethod
    def plan_call(args):
        return None


def planned(program) -> tuple[dict, dict]:
    """Run `program` (returns outputs) under the offline plan's recording monitor: (resources by type, outputs)."""
    from goldenenv import plan

    records, outputs = plan.record(program, MockCloud())
    return {r.type: r for r in records}, outputs


@pytest.mark.parametrize("hard_stop", [True, False])
def test_budget_guard_is_a_timer_function_running_guard_py_alone(hard_stop):
    args = budget.BudgetGuardArgs(project=PROJECT, stack=STACK, monthly_limit=400_000, currency="CNY",
                                  thresholds=[80, 50, 100, 50], emails=["ml-infra@example.com"],
                                  hard_stop=hard_stop, region=REGION, tags={"goldenenv:stack": STACK})
    resources, outputs = planned(lambda: {"name": budget.BudgetGuard("b", args).function_name})
    name = outputs["name"]
    function = resources["alicloud:fc/v3Function:V3Function"].props
    trigger = resources["alicloud:fc/v3Trigger:V3Trigger"].props
    role = resources["alicloud:ram/role:Role"].props
    policy = json.loads(resources["alicloud:ram/policy:Policy"].props["policyDocument"])

    assert name == function["functionName"] == "goldenenv-llm-pretrain-alicloud-ebmgn8v-2node-budget-guard"
    assert (function["runtime"], function["handler"]) == ("python3.10", "guard.handler")
    archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(function["code"]["zipFile"])))
    assert archive.namelist() == ["guard.py", "stopcore.py"], "the guard imports the stop core beside it"
    assert archive.read("guard.py") == Path(guard.__file__).read_bytes()
    assert archive.read("stopcore.py") == Path(guard.stopcore.__file__).read_bytes()
    assert function["timeout"] == guard.TIMEOUT_SECONDS < 15 * 60, "room for the waits, within one timer period"
    assert resources["alicloud:fc/v3Function:V3Function"].outputs["role"] == \
        f"acs:ram::0000000000000000:role/{role['roleName']}"
    env = function["environmentVariables"]
    assert env["GOLDENENV_THRESHOLDS"] == "50,80,100" and env["GOLDENENV_BSS_ENDPOINT"] == "business.aliyuncs.com"
    assert env["GOLDENENV_HARD_STOP"] == str(hard_stop).lower() and env["GOLDENENV_MONTHLY_LIMIT"] == "400000.00"

    assert trigger["triggerType"] == "timer" and trigger["qualifier"] == "LATEST"
    assert json.loads(trigger["triggerConfig"]) == {"cronExpression": "@every 15m", "enable": True}
    assert json.loads(role["assumeRolePolicyDocument"])["Statement"][0]["Principal"] == {"Service": ["fc.aliyuncs.com"]}

    by_action = {a: s for s in policy["Statement"] for a in s["Action"]}
    assert by_action["bssapi:DescribeSplitItemBill"]["Resource"] == "*"
    owned = {"StringEquals": {"acs:ResourceTag/goldenenv:stack": STACK, "acs:ResourceTag/project": PROJECT}}
    assert by_action["ecs:TagResources"]["Condition"] == owned
    if hard_stop:
        assert by_action["ecs:StopInstances"]["Condition"] == owned
        assert by_action["ecs:StopInstances"]["Resource"] == f"acs:ecs:{REGION}:*:instance/*"
    else:
        assert "ecs:StopInstances" not in by_action
    assert "dm:SingleSendMail" not in by_action  # no sender configured


def test_a_failing_guard_alarms_the_budgets_addresses_without_a_sender():
    """A failed invocation (a stop that failed among them) reaches every budget address through CloudMonitor, even
    with no Direct Mail sender to mail from."""
    emails = ["ml-infra@example.com", "finance@example.com", "ml-infra@example.com"]
    args = budget.BudgetGuardArgs(project=PROJECT, stack=STACK, monthly_limit=400_000, currency="CNY",
                                  thresholds=[50, 100], emails=emails, hard_stop=True, region=REGION,
                                  tags={"goldenenv:stack": STACK, "project": PROJECT})
    from goldenenv import plan

    records, outputs = plan.record(lambda: {"name": budget.BudgetGuard("b", args).function_name}, MockCloud())
    contacts = {r.props["alarmContactName"]: r.props["channelsMail"] for r in records
                if r.type == "alicloud:cms/alarmContact:AlarmContact"}
    (group,) = [r.props for r in records if r.type == "alicloud:cms/alarmContactGroup:AlarmContactGroup"]
    (alarm,) = [r.props for r in records if r.type == "alicloud:cms/alarm:Alarm"]
    assert sorted(contacts.values()) == ["finance@example.com", "ml-infra@example.com"]
    assert sorted(group["contacts"]) == sorted(contacts) and all(2 <= len(n) <= 40 for n in contacts)
    assert alarm["contactGroups"] == [group["alarmContactGroupName"]]
    assert (alarm["project"], alarm["metric"]) == ("acs_fc", "FunctionFunctionErrors")
    assert json.loads(alarm["metricDimensions"]) == [{"region": REGION, "functionName": outputs["name"]}]
    critical = alarm["escalationsCritical"]
    assert (critical["comparisonOperator"], critical["threshold"]) == (">", "0")
    assert alarm["enabled"] is True and alarm["tags"] == args.tags


def test_the_code_archive_is_the_same_bytes_on_every_plan():
    assert budget.code_zip() == budget.code_zip()


@pytest.mark.parametrize("project,stack", [("p", "s"), ("P_roj ect", "dev"), ("x" * 80, "y" * 80)])
def test_guard_names_fit_function_compute_and_ram(project, stack):
    names = budget.resource_names(project, stack)
    assert len(names["function"]) <= 64 and len(names["role"]) <= 64 and len(names["policy"]) <= 128
    assert all(ch.isalnum() or ch == "-" for value in names.values() for ch in value)
    assert names["function"][0].isalpha()


def test_an_alert_without_a_sender_fails_the_run_rather_than_pass_silently():
    cloud, mailed = Cloud(), []
    notify = guard.direct_mail(lambda action, params: mailed.append(params) or {}, sender="", recipients=["a@x.io"])
    report = guard.run(budget_of(400_000), bill=cloud.bill, ecs=cloud.ecs, notify=notify, now=NOW)
    assert report.alerts and mailed == []
    assert any("could not send the alert" in f and "no Direct Mail sender" in f for f in report.failed)


def test_a_logstore_keeps_the_guards_output_and_only_it_may_be_written():
    args = budget.BudgetGuardArgs(project=PROJECT, stack=STACK, monthly_limit=400_000, currency="CNY",
                                  thresholds=[50], emails=["a@x.io"], hard_stop=False, region=REGION, tags={},
                                  alert_sender="guard@mail.example.com", log_project="ops-logs",
                                  log_store="budget-guard")
    resources, _ = planned(lambda: {"name": budget.BudgetGuard("b", args).function_name})
    function = resources["alicloud:fc/v3Function:V3Function"].props
    assert function["logConfig"]["project"] == "ops-logs" and function["logConfig"]["logstore"] == "budget-guard"
    policy = json.loads(resources["alicloud:ram/policy:Policy"].props["policyDocument"])
    by_action = {a: s for s in policy["Statement"] for a in s["Action"]}
    assert by_action["log:PostLogStoreLogs"]["Resource"] == f"acs:log:{REGION}:*:project/ops-logs/logstore/budget-guard"
    assert by_action["dm:SingleSendMail"]["Resource"] == "*"
