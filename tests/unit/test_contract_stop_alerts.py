"""RULE: on every cloud with the hard stop, a stop function that fails alerts the budget's contacts.

A hard stop, time to live or idle stop that fails leaves nodes billing while the user believes them stopped, so each
shipped stack with a hard stop must plan, for each of its stop functions, an alert on that function's failures whose
notification reaches every address of goldenenv:budget.emails. Each cloud's plan is read in its own terms here (the
reader follows the alert from the function to the addresses through the resources the plan holds); the functions
themselves fail their invocation when a stop fails (tests/unit/test_gcp_budget.py, test_azure_budget.py,
test_reaper.py, test_alicloud_guard.py), which is what the alerts count.

A reader is the provider's (its resource types): a cloud is read by the reader of the provider it builds on
(tests/unit/cloudfolder.py), so a new cloud on a provider read here is held to the rule the day it is added; one on
a provider no reader knows fails, naming READERS, until its alert is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import cloudfolder
import pytest
import shipped

from goldenenv import clouds, plan, stackconfig
from goldenenv.clouds.base import Capability
from goldenenv.guardrails import PlannedResource

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STACKS = Path(__file__).resolve().parents[2] / "stacks"
HARD_STOP_CLOUDS = sorted(n for n in clouds.names() if Capability.HARD_STOP in clouds.get(n).capabilities)


def shipped_with_hard_stop() -> list[tuple[str, str]]:
    found = []
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        config = stackconfig.read_stack_file(path)
        budget = config.get("goldenenv:budget") or {}
        if config.get("goldenenv:cloud") in HARD_STOP_CLOUDS and isinstance(budget, dict) and budget.get("hardStop"):
            found.append((config["goldenenv:cloud"], path.name.removeprefix("Pulumi.").removesuffix(".yaml")))
    return found


SHIPPED = shipped_with_hard_stop()


def planned(stack: str) -> plan.Plan:
    return shipped.plan_of(stack)


def of(resources: Iterable[PlannedResource], typ: str) -> list[PlannedResource]:
    return [r for r in resources if r.type == typ]


def ident(resource: PlannedResource) -> str | None:
    return resource.id or resource.outputs.get("id")


# ---------------------------------------------------------------- AWS: a Lambda Errors alarm -> SNS email subscriptions

def aws(resources: list[PlannedResource]) -> dict[str, set[str]]:
    functions = [f for f in of(resources, "aws:lambda/function:Function") if f.props.get("handler") == "reaper.handler"]
    alarms = [a for a in of(resources, "aws:cloudwatch/metricAlarm:MetricAlarm")
              if a.props.get("namespace") == "AWS/Lambda" and a.props.get("metricName") == "Errors"]
    emails: dict[str, set[str]] = {}
    for function in functions:
        name = function.props.get("name") or function.outputs.get("name") or function.name
        topics = {t for a in alarms if (a.props.get("dimensions") or {}).get("FunctionName") == name
                  for t in a.props.get("alarmActions") or []}
        emails[name] = {s.props["endpoint"] for s in of(resources, "aws:sns/topicSubscription:TopicSubscription")
                        if s.props.get("protocol") == "email" and s.props.get("topic") in topics}
    return emails


# ---------------------------------------------------------------- Google Cloud: an alert policy -> email channels

def gcp(resources: list[PlannedResource]) -> dict[str, set[str]]:
    channels = {ident(c): c for c in of(resources, "gcp:monitoring/notificationChannel:NotificationChannel")}
    emails: dict[str, set[str]] = {}
    for function in of(resources, "gcp:cloudfunctionsv2/function:Function"):
        name = function.props["name"]
        watching = [p for p in of(resources, "gcp:monitoring/alertPolicy:AlertPolicy")
                    if any(watches_errors(c, name) for c in p.props.get("conditions") or [])]
        emails[name] = {channels[c].props["labels"]["email_address"] for p in watching
                        for c in p.props.get("notificationChannels") or []
                        if c in channels and channels[c].props.get("type") == "email"}
    return emails


def watches_errors(condition: dict, function: str) -> bool:
    """A log-match condition on the function's Cloud Run service at ERROR or above."""
    text = (condition.get("conditionMatchedLog") or {}).get("filter") or ""
    return (f'resource.labels.service_name = "{function}"' in text and 'resource.type = "cloud_run_revision"' in text
            and "severity >= ERROR" in text)


# ---------------------------------------------------------------- Azure: a metric alert on failed invocations -> emails

def azure(resources: list[PlannedResource]) -> dict[str, set[str]]:
    groups = {ident(g): g for g in of(resources, "azure-native:monitor:ActionGroup")}
    components = of(resources, "azure-native:applicationinsights:Component")
    emails: dict[str, set[str]] = {}
    for app in of(resources, "azure-native:web:WebApp"):
        if "functionapp" not in str(app.props.get("kind")):
            continue
        settings = {s["name"]: s["value"] for s in (app.props.get("siteConfig") or {}).get("appSettings") or []}
        recorded = [ident(c) for c in components
                    if settings.get("APPLICATIONINSIGHTS_CONNECTION_STRING") == c.outputs.get("connectionString")]
        watching = [a for a in of(resources, "azure-native:monitor:MetricAlert")
                    if set(a.props.get("scopes") or []) & set(recorded) and counts_failures(a)]
        emails[app.props["name"]] = {r["emailAddress"] for a in watching for action in a.props.get("actions") or []
                                     for r in (groups.get(action.get("actionGroupId")) or _no_group).props.get(
                                         "emailReceivers") or []}
    return emails


def counts_failures(alert: PlannedResource) -> bool:
    criteria = alert.props.get("criteria") or {}
    return any(c.get("metricName") == "requests/failed" and c.get("operator") == "GreaterThan"
               and float(c.get("threshold", 1)) == 0 for c in criteria.get("allOf") or [])


_no_group = PlannedResource(urn="", type="", name="", props={})


# ---------------------------------------------------------------- Alibaba Cloud: a CloudMonitor alarm -> contacts

def alicloud(resources: list[PlannedResource]) -> dict[str, set[str]]:
    contacts = {c.props["alarmContactName"]: c.props.get("channelsMail")
                for c in of(resources, "alicloud:cms/alarmContact:AlarmContact")}
    groups = {g.props["alarmContactGroupName"]: g.props.get("contacts") or []
              for g in of(resources, "alicloud:cms/alarmContactGroup:AlarmContactGroup")}
    emails: dict[str, set[str]] = {}
    for function in of(resources, "alicloud:fc/v3Function:V3Function"):
        if function.props.get("handler") != "guard.handler":
            continue
        name = function.props["functionName"]
        watching = [a for a in of(resources, "alicloud:cms/alarm:Alarm")
                    if a.props.get("project") == "acs_fc" and a.props.get("metric") == "FunctionFunctionErrors"
                    and any(d.get("functionName") == name for d in json.loads(a.props.get("metricDimensions") or "[]"))]
        emails[name] = {contacts.get(c) for a in watching for g in a.props.get("contactGroups") or []
                        for c in groups.get(g, [])} - {None}
    return emails


# ---------------------------------------------------------------- Huawei Cloud: the function publishes its failure to
#                                                                   an SMN topic -> email subscriptions

def huawei(resources: list[PlannedResource]) -> dict[str, set[str]]:
    """The stop function (a FunctionGraph function whose user_data sets GOLDENENV_LIMIT) publishes a failed run to
    the SMN topic its GOLDENENV_ALERT_TOPIC names; the topic's email subscriptions are the addresses it reaches."""
    emails: dict[str, set[str]] = {}
    for function in of(resources, "huaweicloud:FunctionGraph/function:Function"):
        env = json.loads(function.props.get("userData") or "{}")
        if "GOLDENENV_LIMIT" not in env:
            continue
        topic = env.get("GOLDENENV_ALERT_TOPIC")
        emails[function.props["name"]] = {s.props["endpoint"] for s in of(resources,
                                                                           "huaweicloud:Smn/subscription:Subscription")
                                          if s.props.get("protocol") == "email" and topic
                                          and s.props.get("topicUrn") == topic}
    return emails


# ---------------------------------------------------------------- Tencent Cloud: an alarm policy on SCF's Error metric
#                                                                   -> an alarm notice -> CAM users' email addresses

def tencent(resources: list[PlannedResource]) -> dict[str, set[str]]:
    """The function's Error metric (QCE/SCF_V2) alarmed by a policy bound to it by its functionName dimension; the
    policy's notices e-mail CAM users (receiver type USER, channel EMAIL), each user's address its email."""
    users = {u.outputs.get("uid"): u.props.get("email") for u in of(resources, "tencentcloud:Cam/user:User")}
    notices = {ident(n): n for n in of(resources, "tencentcloud:Monitor/alarmNotice:AlarmNotice")}
    bindings = of(resources, "tencentcloud:Monitor/policyBindingObject:PolicyBindingObject")
    emails: dict[str, set[str]] = {}
    for function in of(resources, "tencentcloud:Scf/function:Function"):
        if function.props.get("handler") != "stop.handler":
            continue
        name = function.props["name"]
        bound = {b.props.get("policyId") for b in bindings
                 if any(json.loads(d.get("dimensionsJson") or "{}").get("functionName") == name
                        for d in b.props.get("dimensions") or [])}
        watching = [p for p in of(resources, "tencentcloud:Monitor/alarmPolicy:AlarmPolicy")
                    if ident(p) in bound and p.props.get("monitorType") == "MT_QCE" and p.props.get("enable") != 0
                    and any(r.get("metricName") == "Error" and r.get("operator") == "gt" and float(r.get("value")) == 0
                            for r in (p.props.get("conditions") or {}).get("rules") or [])]
        emails[name] = {users.get(uid) for p in watching for n in p.props.get("noticeIds") or []
                        for notice in [notices.get(n)] if notice is not None
                        for u in notice.props.get("userNotices") or []
                        if u.get("receiverType") == "USER" and "EMAIL" in (u.get("noticeWays") or [])
                        for uid in u.get("userIds") or []} - {None}
    return emails


READERS: dict[str, Callable[[list[PlannedResource]], dict[str, set[str]]]] = {
    "aws": aws, "gcp": gcp, "azure-native": azure, "alicloud": alicloud, "tencentcloud": tencent, "huaweicloud": huawei}
"""Provider -> the stop functions in a plan of its resources, and the addresses an alert on each one's failures
reaches."""


def test_every_hard_stop_cloud_ships_a_stack_with_the_hard_stop():
    assert {cloud for cloud, _ in SHIPPED} == set(HARD_STOP_CLOUDS)


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_a_failing_stop_function_alerts_the_budgets_contacts(cloud, stack):
    provider = cloudfolder.provider(cloud)
    if provider not in READERS:
        pytest.fail(f"add a reader of {provider} (the provider {cloud} builds on) to READERS in "
                    f"tests/unit/test_contract_stop_alerts.py: {cloud} declares the hard stop, and the reader follows "
                    "its stop function's failure alert to the addresses it reaches", pytrace=False)
    found = planned(stack)
    wanted = set(found.spec.budget.emails)
    reached = READERS[provider](found.resources)
    assert reached, f"{stack}: no stop function in the plan"
    assert {function: sorted(wanted - emails) for function, emails in reached.items() if wanted - emails} == {}, (
        f"{stack}: a failure of these stop functions reaches no alert to these budget emails")
