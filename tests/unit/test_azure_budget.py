"""Azure's budget with a hard stop: the BudgetStop component under Pulumi's mocks, and its stop function run against a
local fake of Azure Resource Manager and the App Service identity endpoint.

The fake answers in the shapes Azure documents: the identity endpoint's token (GET ?resource=&api-version=2019-08-01
with X-IDENTITY-HEADER, answering access_token/expires_on/resource/token_type/client_id; 400 without the header),
Virtual Machine Scale Sets - List (``value`` and an absolute ``nextLink``), Scale Set VMs - List with
``$expand=instanceView`` (``instanceId``, ``properties.instanceView.statuses`` with ProvisioningState/... and its
``time``, PowerState/...), Virtual Machines - List and Instance View, Deallocate (202 Accepted, empty body,
``Azure-AsyncOperation`` and ``Location`` headers), Budgets - Get (``properties.amount``,
``properties.currentSpend.{amount,unit}``), Metrics - List (``value[].timeseries[].metadatavalues`` /
``data[].average``) and ARM's error body ({"error": {"code", "message"}}). It lists every VM of the group whatever
its tags, so the function's own tag check is what keeps other stacks' VMs running. The alerts are Microsoft's test
payloads for a budget (alerts-common-schema-test-action-definitions): the common schema's CostAlerts and the older
"AIP Budget Notification".
"""

from __future__ import annotations

import dataclasses

import ast
import importlib.util
import json
import logging
import shutil
import sys
import threading
import types
import urllib.parse
import uuid
from datetime import date, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from goldenenv import spec
from goldenenv.clouds.azure import budget
from goldenenv.clouds.azure.stopfn import function_app as stopfn

import stopfakes

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PROJECT, STACK = "llm-pretrain", "azure-ndh100-2node"
SUB = "00000000-0000-0000-0000-000000000000"
RG = "rg-llm-pretrain-azure-ndh100-2node"
LOCATION = "eastus"
TAGS = {"project": PROJECT, "owner": "ml-infra", "cost-center": "research", "goldenenv:stack": STACK}
EMAILS = ["ml-infra@example.com", "finance@example.com"]
TODAY = date(2026, 7, 20)
NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.fake-arm-token"
IDENTITY_HEADER = "b0c3f0a2-identity-header"
GROUP_ID = f"/subscriptions/{SUB}/resourceGroups/{RG}"
COMPUTE_ACTIONS = [
    "Microsoft.Compute/virtualMachineScaleSets/deallocate/action",
    "Microsoft.Compute/virtualMachineScaleSets/read",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/instanceView/read",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
    "Microsoft.Compute/virtualMachines/instanceView/read",
    "Microsoft.Compute/virtualMachines/read",
]


# ---------------------------------------------------------------- the component under mocks

class MockCloud:
    """budget.plan_mock, and the two generic answers the Azure cloud gives for an identity and an assignment."""

    @staticmethod
    def plan_mock(args):
        found = budget.plan_mock(args)
        if found is not None:
            return found
        inputs = args.inputs
        if args.typ == "azure-native:managedidentity:UserAssignedIdentity":
            rid = (f"/subscriptions/{SUB}/resourceGroups/{inputs['resourceGroupName']}/providers/"
                   f"Microsoft.ManagedIdentity/userAssignedIdentities/{inputs['resourceName']}")
            return rid, {"name": inputs["resourceName"], "principalId": str(uuid.uuid5(uuid.NAMESPACE_URL, rid)),
                         "clientId": str(uuid.uuid5(uuid.NAMESPACE_DNS, rid))}
        if args.typ == "azure-native:authorization:RoleAssignment":
            name = inputs.get("roleAssignmentName") or args.name
            return f"{inputs['scope']}/providers/Microsoft.Authorization/roleAssignments/{name}", {"name": name}
        return None

    @staticmethod
    def plan_call(args):
        return None


def args_of(**changes) -> budget.BudgetStopArgs:
    import pulumi

    values = dict(project=PROJECT, stack=STACK, subscription_id=pulumi.Output.from_input(SUB),
                  resource_group=pulumi.Output.from_input(RG), location=LOCATION, monthly_limit=25_000.5,
                  currency="USD", thresholds=[80, 50, 100, 50], emails=EMAILS, hard_stop=True, tags=TAGS,
                  ttl_hours=None, idle_minutes=None, forecast_thresholds=[100], node_vcpus=96, today=TODAY)
    values.update(changes)
    return budget.BudgetStopArgs(**values)


def planned(**changes) -> tuple[dict[str, list], dict]:
    """Resources by type, and the component's outputs."""
    from goldenenv import plan

    def program():
        stop = budget.BudgetStop("b", args_of(**changes))
        return {"function": stop.function_name, "budget": stop.budget_name, "group": stop.action_group_id,
                "urn": stop.urn}

    records, outputs = plan.record(program, MockCloud())
    by_type: dict[str, list] = {}
    for record in records:
        by_type.setdefault(record.type, []).append(record)
    return by_type, outputs


def stop_group(resources: dict[str, list]):
    """The hard stop's action group: the one whose receiver is the stack's function; None without one."""
    found = [g for g in resources.get("azure-native:monitor:ActionGroup", [])
             if g.props.get("azureFunctionReceivers")]
    assert len(found) <= 1
    return found[0] if found else None


def one(resources: dict[str, list], typ: str):
    (found,) = resources[typ]
    return found


@pytest.fixture(scope="module")
def hard_stop_plan():
    return planned()


def settings(app) -> dict[str, str]:
    return {s["name"]: s["value"] for s in app.props["siteConfig"]["appSettings"]}


def test_the_budget_is_monthly_at_subscription_scope_on_the_stacks_tags_and_emails_each_threshold(hard_stop_plan):
    resources, outputs = hard_stop_plan
    b = one(resources, "azure-native:consumption:Budget")
    p = b.props
    assert p["scope"] == f"/subscriptions/{SUB}"
    assert p["category"] == "Cost" and p["timeGrain"] == "Monthly" and p["amount"] == 25000.5
    assert p["timePeriod"] == {"startDate": "2026-07-01T00:00:00Z"} and "timePeriod" in b.ignore_changes
    assert p["filter"] == {"and": [{"tags": {"name": "goldenenv:stack", "operator": "In", "values": [STACK]}},
                                   {"tags": {"name": "project", "operator": "In", "values": [PROJECT]}}]}
    kinds = sorted((n["thresholdType"], n["threshold"]) for n in p["notifications"].values())
    assert kinds == [("Actual", 50), ("Actual", 80), ("Actual", 100), ("Forecasted", 100)]
    for notification in p["notifications"].values():
        assert notification["contactEmails"] == EMAILS and notification["enabled"] is True
        assert notification["operator"] == "GreaterThanOrEqualTo"
    assert outputs["budget"] == p["budgetName"] == f"goldenenv-{PROJECT}-{STACK}"


def test_only_the_100_percent_actual_notification_calls_the_action_group_and_only_with_the_hard_stop(hard_stop_plan):
    resources, outputs = hard_stop_plan
    group = stop_group(resources)
    notifications = one(resources, "azure-native:consumption:Budget").props["notifications"]
    calling = {k: n["contactGroups"] for k, n in notifications.items() if n.get("contactGroups")}
    assert calling == {"actual-100-percent": [group.id]} and outputs["group"] == group.id
    assert group.id == f"{GROUP_ID}/providers/Microsoft.Insights/actionGroups/{group.props['actionGroupName']}"

    without, outputs = planned(hard_stop=False, thresholds=[50, 80])
    assert stop_group(without) is None and outputs.get("group") is None
    assert "azure-native:web:WebApp" not in without and outputs.get("function") is None
    kinds = sorted((n["thresholdType"], n["threshold"])
                   for n in one(without, "azure-native:consumption:Budget").props["notifications"].values())
    assert kinds == [("Actual", 50), ("Actual", 80), ("Forecasted", 100)]
    assert not any(n.get("contactGroups") for n in
                   one(without, "azure-native:consumption:Budget").props["notifications"].values())


def test_the_action_group_calls_the_stacks_alert_function_over_https_in_the_common_schema(hard_stop_plan):
    resources, outputs = hard_stop_plan
    app = one(resources, "azure-native:web:WebApp")
    group = stop_group(resources).props
    (receiver,) = group["azureFunctionReceivers"]
    assert receiver["functionAppResourceId"] == app.id
    assert receiver["functionName"] == "budget_alert" == stopfn.ALERT_FUNCTION
    assert receiver["httpTriggerUrl"] == f"https://{app.outputs['defaultHostName']}/api/budget-alert"
    assert "code=" not in receiver["httpTriggerUrl"]  # no function key in state
    assert receiver["useCommonAlertSchema"] is True
    assert group["location"] == "Global" and len(group["groupShortName"]) <= 12 and group["enabled"] is True
    assert not group.get("emailReceivers") and not group.get("webhookReceivers")
    assert outputs["function"] == app.props["name"]


def test_the_function_holds_custom_roles_with_only_what_it_calls_on_the_group_and_the_budget(hard_stop_plan):
    resources, _ = hard_stop_plan
    app = one(resources, "azure-native:web:WebApp")
    definitions = {d.name: d for d in resources["azure-native:authorization:RoleDefinition"]}
    compute, reads = definitions["b-fn-compute-role"].props, definitions["b-fn-budget-role"].props
    assert [sorted(p["actions"]) for p in compute["permissions"]] == [COMPUTE_ACTIONS]
    assert compute["assignableScopes"] == [GROUP_ID]
    assert [p["actions"] for p in reads["permissions"]] == [["Microsoft.Consumption/budgets/read"]]
    assert reads["assignableScopes"] == [f"/subscriptions/{SUB}"]
    for role in (compute, reads):
        assert not any(p.get("dataActions") or p.get("notActions") for p in role["permissions"])
        assert role["roleType"] == "CustomRole" and uuid.UUID(role["roleDefinitionId"])
    grants = {g.name: g.props for g in resources["azure-native:authorization:RoleAssignment"]}
    principal = app.outputs["identity"]["principalId"]
    assert grants["b-fn-compute-grant"] == {**grants["b-fn-compute-grant"], "scope": GROUP_ID,
                                            "principalId": principal, "principalType": "ServicePrincipal",
                                            "roleDefinitionId": definitions["b-fn-compute-role"].id}
    assert grants["b-fn-budget-grant"]["scope"] == f"/subscriptions/{SUB}"
    assert grants["b-fn-budget-grant"]["roleDefinitionId"] == definitions["b-fn-budget-role"].id
    every = [a for d in definitions.values() for p in d.props["permissions"] for a in p["actions"]]
    assert not [a for a in every if any(w in a.lower() for w in ("poweroff", "write", "delete", "start", "*"))]


def test_the_idle_stop_adds_only_reading_metrics_and_no_hard_stop_means_no_budget_role():
    resources, _ = planned(hard_stop=False, idle_minutes=30)
    (role,) = resources["azure-native:authorization:RoleDefinition"]
    assert sorted(role.props["permissions"][0]["actions"]) == sorted(
        [*COMPUTE_ACTIONS, "Microsoft.Insights/metrics/read"])
    assert stop_group(resources) is None
    env = settings(one(resources, "azure-native:web:WebApp"))
    assert env["GOLDENENV_IDLE_MINUTES"] == "30" and env["GOLDENENV_HARD_STOP"] == "false"
    assert env["GOLDENENV_IDLE_CPU_PERCENT"] == "0.5208"  # half a core of 96 vCPUs


def test_the_app_is_https_only_tls12_without_ftp_or_basic_auth_and_its_storage_is_private(hard_stop_plan):
    resources, _ = hard_stop_plan
    app = one(resources, "azure-native:web:WebApp").props
    assert app["httpsOnly"] is True and app["kind"] == "functionapp,linux"
    site = app["siteConfig"]
    assert site["ftpsState"] == "Disabled" and site["minTlsVersion"] == "1.2" and site["scmMinTlsVersion"] == "1.2"
    for typ in ("azure-native:web:WebAppFtpAllowed", "azure-native:web:WebAppScmAllowed"):
        assert one(resources, typ).props["allow"] is False
    account = one(resources, "azure-native:storage:StorageAccount").props
    assert account["allowBlobPublicAccess"] is False and account["minimumTlsVersion"] == "TLS1_2"
    assert account["enableHttpsTrafficOnly"] is True and account["allowCrossTenantReplication"] is False
    assert one(resources, "azure-native:storage:BlobContainer").props["publicAccess"] == "None"
    values = " ".join(str(v) for v in settings(one(resources, "azure-native:web:WebApp")).values())
    assert not any(secret in values for secret in ("AccountKey", "SharedAccessSignature", "sig=", "code="))
    plan = one(resources, "azure-native:web:AppServicePlan").props
    assert plan["sku"] == {"name": "FC1", "tier": "FlexConsumption"} and plan["reserved"] is True


def test_the_app_runs_the_shipped_package_with_its_own_identity_for_storage(hard_stop_plan):
    resources, _ = hard_stop_plan
    app = one(resources, "azure-native:web:WebApp")
    account = one(resources, "azure-native:storage:StorageAccount")
    container = one(resources, "azure-native:storage:BlobContainer")
    blob = one(resources, "azure-native:storage:Blob").props
    runtime = one(resources, "azure-native:managedidentity:UserAssignedIdentity")
    config = app.props["functionAppConfig"]
    assert config["runtime"] == {"name": "python", "version": "3.12"}
    storage = config["deployment"]["storage"]
    assert storage["type"] == "blobContainer"
    account_name, container_name = account.props["accountName"], container.props["containerName"]
    assert storage["value"] == f"https://{account_name}.blob.core.windows.net/{container_name}"
    assert storage["authentication"] == {"type": "UserAssignedIdentity",
                                         "userAssignedIdentityResourceId": runtime.id}
    assert app.props["identity"]["type"] == "SystemAssigned, UserAssigned"
    assert blob["blobName"] == "released-package.zip" and blob["containerName"] == container.props["containerName"]
    grant = next(g.props for g in resources["azure-native:authorization:RoleAssignment"]
                 if g.name == "b-fn-storage-grant")
    assert grant["scope"] == account.id and grant["principalId"] == runtime.outputs["principalId"]
    assert grant["roleDefinitionId"].endswith("/roleDefinitions/b7e6dc6d-f1e8-4753-8033-0f276bb0955b")
    env = settings(app)
    assert env["AzureWebJobsStorage__accountName"] == account.props["accountName"]
    assert env["AzureWebJobsStorage__credential"] == "managedidentity"
    assert env["AzureWebJobsStorage__clientId"] == runtime.outputs["clientId"]
    assert {k: env[k] for k in env if k.startswith("GOLDENENV_")} == {
        "GOLDENENV_SUBSCRIPTION_ID": SUB, "GOLDENENV_RESOURCE_GROUP": RG, "GOLDENENV_PROJECT": PROJECT,
        "GOLDENENV_STACK": STACK, "GOLDENENV_HARD_STOP": "true", "GOLDENENV_BUDGET_NAME": BUDGET,
        "GOLDENENV_BUDGET_LIMIT": "25000.50", "GOLDENENV_CURRENCY": "USD",
        "GOLDENENV_CODE_DIGEST": budget.source_digest()}
    assert set(budget.source_archive().assets) == {"function_app.py", "host.json", "stopcore.py"}


def test_the_code_digest_changes_with_the_code(tmp_path):
    shipped = tmp_path / "stopfn"
    shutil.copytree(budget.STOPFN_DIR, shipped)
    source = dataclasses.replace(budget.STOPFN, folder=shipped)
    before = source.digest()
    assert before == source.digest() == budget.source_digest()
    (shipped / "function_app.py").write_text((shipped / "function_app.py").read_text() + "\n# changed\n")
    assert source.digest() != before
    (shipped / "README.md").write_text("not shipped")
    after = source.digest()
    assert source.digest() == after  # only the shipped files count


def test_every_taggable_resource_carries_the_stacks_tags_and_every_child_is_the_components(hard_stop_plan):
    resources, outputs = hard_stop_plan
    for typ in ("azure-native:web:WebApp", "azure-native:web:AppServicePlan", "azure-native:storage:StorageAccount",
                "azure-native:managedidentity:UserAssignedIdentity", "azure-native:operationalinsights:Workspace",
                "azure-native:applicationinsights:Component", "azure-native:monitor:MetricAlert"):
        tags = {k: v for k, v in one(resources, typ).props["tags"].items()
                if k not in ("goldenenv-holds", "goldenenv-hardening-exception")}
        assert tags == TAGS, typ
    account = one(resources, "azure-native:storage:StorageAccount").props
    assert account["tags"]["goldenenv-holds"] == "function-code"
    assert account["tags"]["goldenenv-hardening-exception"] == "function-deployment-key"  # why shared key stays on
    assert [g.props["tags"] for g in resources["azure-native:monitor:ActionGroup"]] == [TAGS, TAGS]
    children = [r for rs in resources.values() for r in rs if r.type != "goldenenv:azure:BudgetStop"]
    assert children and all(r.parent_urn == outputs["urn"] for r in children)


def test_a_failing_function_alerts_the_budgets_emails_through_its_own_action_group(hard_stop_plan):
    """Failed invocations (the timer raised, the alert answered 500) count in Application Insights' requests/failed,
    on which a metric alert emails the budget's addresses; never through the hard stop's group."""
    resources, _ = hard_stop_plan
    app = one(resources, "azure-native:web:WebApp")
    insights = one(resources, "azure-native:applicationinsights:Component")
    workspace = one(resources, "azure-native:operationalinsights:Workspace")
    alert = one(resources, "azure-native:monitor:MetricAlert").props
    assert settings(app)["APPLICATIONINSIGHTS_CONNECTION_STRING"] == insights.outputs["connectionString"]
    assert insights.props["workspaceResourceId"] == workspace.id and insights.props["ingestionMode"] == "LogAnalytics"
    assert alert["scopes"] == [insights.id] and alert["enabled"] is True
    (criterion,) = alert["criteria"]["allOf"]
    assert alert["criteria"]["odataType"] == "Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria"
    assert (criterion["metricNamespace"], criterion["metricName"]) == ("microsoft.insights/components",
                                                                       "requests/failed")
    assert (criterion["operator"], criterion["threshold"], criterion["timeAggregation"]) == ("GreaterThan", 0, "Count")
    groups = {g.id: g.props for g in resources["azure-native:monitor:ActionGroup"]}
    (action,) = alert["actions"]
    people = groups[action["actionGroupId"]]
    assert sorted(r["emailAddress"] for r in people["emailReceivers"]) == sorted(EMAILS)
    assert not people.get("azureFunctionReceivers") and len(people["groupShortName"]) <= 12


def test_a_failed_deallocation_fails_the_timer_run(arm, monkeypatch):
    """What the failure alert counts: Azure refuses the deallocation, the run raises."""
    arm.scale_sets["gpu"]["os_disk"] = {"diff_disk_settings": {"option": "Local"}}
    for key, value in arm.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(stopfn, "utc_now", lambda: NOW)
    with pytest.raises(RuntimeError, match="gpu/0.*OperationNotAllowed"):
        stopfn.handle_timer()


def test_a_time_to_live_alone_builds_the_function_without_the_hard_stops_action_group():
    resources, outputs = planned(hard_stop=False, ttl_hours=12)
    env = settings(one(resources, "azure-native:web:WebApp"))
    assert env["GOLDENENV_TTL_HOURS"] == "12" and env["GOLDENENV_HARD_STOP"] == "false"
    assert outputs["function"] and outputs.get("group") is None
    assert [d.name for d in resources["azure-native:authorization:RoleDefinition"]] == ["b-fn-compute-role"]


def test_more_notifications_than_a_budget_takes_are_refused_naming_the_keys():
    with pytest.raises(ValueError, match=r"goldenenv:budget.alertThresholds: .*7 notifications \(the hard stop "
                                         r"adds 100 % actual\).*at most 5"):
        planned(thresholds=[10, 20, 30, 40, 50], forecast_thresholds=[100])
    with pytest.raises(ValueError, match="goldenenv:budget.monthlyLimit"):
        planned(monthly_limit=0.001)
    stack_budget = spec.Budget(monthly_limit=500, alert_thresholds=[50, 80], forecast_thresholds=[90, 100, 110],
                               emails=EMAILS, hard_stop=True)
    assert [p.key for p in budget.problems(stack_budget)] == ["goldenenv:budget.alertThresholds"]
    assert budget.problems(spec.Budget(monthly_limit=500, emails=EMAILS, hard_stop=True)) == []


@pytest.mark.parametrize("project,stack", [("p", "s"), ("P_roj ect", "dev"), ("x" * 80, "y" * 80)])
def test_names_fit_azures_rules(project, stack):
    args = args_of(project=project, stack=stack)
    assert budget.BUDGET_NAME.fullmatch(budget.budget_name(args))
    app = budget.function_app_name(args, SUB)
    assert 2 <= len(app) <= 32 and app[0].isalnum() and app[-1].isalnum()
    assert all(c.isalnum() or c == "-" for c in app)
    account = budget.storage_account_name(args, SUB)
    assert 3 <= len(account) <= 24 and account.isalnum() and account == account.lower()
    assert budget.function_app_name(args, SUB) != budget.function_app_name(args, "1" + SUB[1:])


def test_the_budget_starts_on_the_first_of_its_month():
    assert budget.budget_start(date(2026, 12, 31)) == "2026-12-01T00:00:00Z"
    assert budget.budget_start(None).endswith("-01T00:00:00Z")


def test_keys_names_and_schedule_agree_with_the_program():
    assert stopfn.STACK_TAG_KEY == spec.STACK_TAG_KEY
    resolved = spec.Tags(project=PROJECT, owner="ml", cost_center="cc").resolved(STACK)
    assert resolved[stopfn.STACK_TAG_KEY] == STACK and resolved[stopfn.PROJECT_TAG_KEY] == PROJECT
    env = budget.function_environment(args_of(ttl_hours=1.5, idle_minutes=30))
    names = {v for k, v in vars(stopfn).items() if k.endswith("_ENV")}
    assert set(env) | {stopfn.SUBSCRIPTION_ENV, stopfn.RESOURCE_GROUP_ENV} <= names


def test_the_function_ships_alone_importing_nothing_but_the_standard_library():
    tree = ast.parse(Path(stopfn.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    # the stop core: goldenenv.clouds.stopcore here, stopcore in the package (test_stop_packages runs it alone)
    assert imported - {"azure", "goldenenv", "stopcore"} <= set(sys.stdlib_module_names) | {"__future__"}
    assert json.loads((budget.STOPFN_DIR / "host.json").read_text())["version"] == "2.0"


def load_with_recording_functions(registered: list[tuple[str, dict]]) -> types.ModuleType:
    """function_app.py loaded with a recording stand-in for azure.functions (the worker's library): its decorators
    record what they register and keep each function as it is."""

    class FunctionApp:
        def __init__(self, **kwargs):
            registered.append(("app", kwargs))

        def _record(self, kind):
            def decorator_factory(*args, **kwargs):
                registered.append((kind, kwargs))
                return lambda fn: fn
            return decorator_factory

        def __getattr__(self, kind):
            return self._record(kind)

    fake = types.ModuleType("azure.functions")
    fake.FunctionApp = FunctionApp
    fake.AuthLevel = types.SimpleNamespace(ANONYMOUS="ANONYMOUS", FUNCTION="FUNCTION")
    fake.HttpResponse = lambda body, status_code, mimetype: (body, status_code, mimetype)
    package = types.ModuleType("azure")
    package.functions = fake
    saved = {k: sys.modules.get(k) for k in ("azure", "azure.functions", "stopfn_registered")}
    spec_ = importlib.util.spec_from_file_location("stopfn_registered", stopfn.__file__)
    module = importlib.util.module_from_spec(spec_)
    sys.modules.update({"azure": package, "azure.functions": fake, "stopfn_registered": module})
    try:
        spec_.loader.exec_module(module)
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    return module


def test_the_v2_model_registers_an_anonymous_post_route_and_a_15_minute_timer():
    registered: list[tuple[str, dict]] = []
    module = load_with_recording_functions(registered)
    kinds = {kind: kwargs for kind, kwargs in registered}
    assert kinds["app"] == {"http_auth_level": "ANONYMOUS"}
    assert kinds["route"] == {"route": "budget-alert", "methods": ["POST"], "auth_level": "ANONYMOUS"}
    assert kinds["timer_trigger"]["schedule"] == "0 */15 * * * *" and kinds["timer_trigger"]["run_on_startup"] is False
    assert {kw["name"] for kind, kw in registered if kind == "function_name"} == {"budget_alert", "reaper"}
    assert hasattr(module, "app")


def test_an_alert_that_could_not_be_acted_on_raises_so_the_failure_alert_fires():
    """Azure Functions counts an HTTP-triggered invocation as failed only when the function raises; one that returns
    500 counts as a success (Azure/azure-functions-host#6511), and the stop-failure alert watches failed requests
    (budget.FAILED_METRIC). So a budget that cannot be read must make budget_alert raise, or nobody is told."""
    module = load_with_recording_functions([])
    request = types.SimpleNamespace(get_body=lambda: b"{}")
    module.handle_alert = lambda body: (500, {"failed": ["cannot read the budget b (HTTP 403)"], "deallocated": []})
    with pytest.raises(RuntimeError, match="cannot read the budget b"):
        module.budget_alert(request)
    module.handle_alert = lambda body: (200, {"failed": [], "deallocated": ["gpu/0"]})
    body, status, _ = module.budget_alert(request)
    assert status == 200 and "gpu/0" in body


# ---------------------------------------------------------------- the function against a fake ARM

@pytest.fixture(autouse=True)
def simulated_time(monkeypatch):
    """The stop core's backoffs and waits run on simulated time: a retried call never really sleeps."""
    monkeypatch.setattr(stopfn, "timer_clock", lambda: stopfakes.simulated_clock(stopfn.TIMER_SECONDS))
    monkeypatch.setattr(stopfn, "alert_clock", lambda: stopfakes.simulated_clock(stopfn.ALERT_SECONDS))


def iso(moment: datetime) -> str:
    """As ARM writes times: 2026-07-20T07:00:00.1234567+00:00."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f0+00:00")


class FakeArm:
    """The App Service identity endpoint and the ARM calls the function makes, on one local port."""

    def __init__(self):
        self.scale_sets: dict[str, dict] = {}
        self.vms: dict[str, dict] = {}
        self.budget: dict | int | None = {"amount": 1000.0, "spend": 1200.5, "unit": "USD"}
        self.cpu: dict[str, dict[str, list[float]]] = {}
        self.calls: list[tuple[str, str, dict, dict | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                fake.answer(self, "GET")

            def do_POST(self):  # noqa: N802
                fake.answer(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def env(self, **extra) -> dict[str, str]:
        return {stopfn.SUBSCRIPTION_ENV: SUB, stopfn.RESOURCE_GROUP_ENV: RG, stopfn.PROJECT_ENV: PROJECT,
                stopfn.STACK_ENV: STACK, stopfn.HARD_STOP_ENV: "true", stopfn.BUDGET_NAME_ENV: BUDGET,
                stopfn.BUDGET_LIMIT_ENV: "1000.00", stopfn.CURRENCY_ENV: "USD", stopfn.ARM_URL_ENV: self.base,
                stopfn.IDENTITY_ENDPOINT_ENV: f"{self.base}/msi/token", stopfn.IDENTITY_HEADER_ENV: IDENTITY_HEADER,
                **extra}

    # the fleet

    def scale_set(self, name: str, instances: dict[str, dict], tags: dict | None = None,
                  size: str = "Standard_ND96isr_H100_v5", os_disk: dict | None = None) -> None:
        """A scale set of `size` whose model's OS disk is `os_disk` as the program writes it (nodes.os_disk)."""
        rid = f"{GROUP_ID}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
        self.scale_sets[name] = {"id": rid, "name": name, "tags": TAGS if tags is None else tags,
                                 "instances": instances, "size": size, "os_disk": os_disk or {}}

    def vm(self, name: str, power: str = "running", tags: dict | None = None, **times) -> None:
        rid = f"{GROUP_ID}/providers/Microsoft.Compute/virtualMachines/{name}"
        self.vms[name] = {"id": rid, "name": name, "tags": TAGS if tags is None else tags, "power": power, **times}

    def deallocations(self) -> list[tuple[str, list | None]]:
        """(scale set or VM name, instanceIds) of every deallocate call."""
        found = []
        for method, path, _, body in self.calls:
            if method == "POST" and path.endswith("/deallocate"):
                found.append((path.rsplit("/", 2)[-2], (body or {}).get("instanceIds")))
        return sorted(found, key=lambda x: x[0])

    # the answers

    def answer(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(request.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        path = urllib.parse.unquote(url.path)
        self.calls.append((method, path, query, body))
        if path == "/msi/token":
            if request.headers.get("X-IDENTITY-HEADER") != IDENTITY_HEADER:
                return self.send(request, 400, {"statusCode": 400, "message": "Unable to load the proper Managed "
                                                                              "Identity."})
            if query != {"resource": "https://management.azure.com/", "api-version": "2019-08-01"}:
                return self.send(request, 400, {"statusCode": 400, "message": f"bad query {query}"})
            return self.send(request, 200, {"access_token": TOKEN, "expires_on": "1784538000",
                                            "resource": "https://management.azure.com/", "token_type": "Bearer",
                                            "client_id": "7a2b1c3d-0000-4000-8000-000000000001"})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.send(request, 401, error("InvalidAuthenticationToken", "The access token is invalid."))
        if "api-version" not in query:
            return self.send(request, 400, error("MissingApiVersionParameter", "The api-version query parameter "
                                                                               "(?api-version=) is required."))
        if method == "GET" and path == f"/subscriptions/{SUB}/providers/Microsoft.Consumption/budgets/{BUDGET}":
            return self.budget_answer(request)
        prefix = f"{GROUP_ID}/providers/Microsoft.Compute"
        if method == "GET" and path == f"{prefix}/virtualMachineScaleSets":
            return self.send(request, 200, self.scale_set_page(query.get("$skiptoken")))
        for name, scale_set in self.scale_sets.items():
            if path == f"{scale_set['id']}/virtualMachines" and method == "GET":
                assert query.get("$expand") == "instanceView"
                return self.send(request, 200, {"value": [self.instance(name, i, v)
                                                          for i, v in scale_set["instances"].items()]})
            if path == f"{scale_set['id']}/deallocate" and method == "POST":
                if ephemeral(scale_set["os_disk"]):
                    return self.send(request, 409, error("OperationNotAllowed", EPHEMERAL_DEALLOCATE))
                for instance_id in (body or {}).get("instanceIds") or list(scale_set["instances"]):
                    scale_set["instances"][instance_id]["power"] = "deallocating"
                return self.accepted(request)
            if path == f"{scale_set['id']}/providers/Microsoft.Insights/metrics" and method == "GET":
                return self.send(request, 200, self.metrics(name, query))
        if method == "GET" and path == f"{prefix}/virtualMachines":
            return self.send(request, 200, {"value": [
                {"id": v["id"], "name": n, "type": "Microsoft.Compute/virtualMachines", "location": LOCATION,
                 **({"tags": v["tags"]} if v["tags"] else {}),
                 "properties": {"vmId": str(uuid.uuid5(uuid.NAMESPACE_URL, n)), "provisioningState": "Succeeded",
                                "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
                                **({"timeCreated": iso(v["created"])} if v.get("created") else {})}}
                for n, v in self.vms.items()]})
        for name, vm in self.vms.items():
            if path == f"{vm['id']}/instanceView" and method == "GET":
                return self.send(request, 200, {"computerName": name, "osName": "ubuntu", "osVersion": "22.04",
                                                "statuses": statuses(vm["power"], vm.get("provisioned"))})
            if path == f"{vm['id']}/deallocate" and method == "POST":
                vm["power"] = "deallocating"
                return self.accepted(request)
        if method == "POST" and path.endswith("/powerOff"):
            return self.accepted(request)
        return self.send(request, 404, error("ResourceNotFound", f"The Resource '{path}' was not found."))

    def budget_answer(self, request):
        if isinstance(self.budget, int):
            return self.send(request, self.budget, error("ServerError" if self.budget >= 500 else "NotFound",
                                                         f"HTTP {self.budget}"))
        if self.budget is None:
            return self.send(request, 200, {"id": "x", "name": BUDGET, "properties": {"amount": 1000}})
        return self.send(request, 200, {
            "id": f"/subscriptions/{SUB}/providers/Microsoft.Consumption/budgets/{BUDGET}", "name": BUDGET,
            "type": "Microsoft.Consumption/budgets", "eTag": "\"1d34d016a593709\"",
            "properties": {"category": "Cost", "amount": self.budget["amount"], "timeGrain": "Monthly",
                           "timePeriod": {"startDate": "2026-07-01T00:00:00Z", "endDate": "2036-07-01T00:00:00Z"},
                           "currentSpend": {"amount": self.budget["spend"], "unit": self.budget["unit"]},
                           "notifications": {}}})

    def scale_set_page(self, token: str | None) -> dict:
        """Page 1: the first half and a nextLink; page 2: the rest."""
        sets = [{"id": s["id"], "name": n, "type": "Microsoft.Compute/virtualMachineScaleSets",
                 "location": LOCATION, **({"tags": s["tags"]} if s["tags"] else {}),
                 "sku": {"name": s["size"], "tier": "Standard", "capacity": len(s["instances"])},
                 "properties": {"orchestrationMode": "Uniform", "singlePlacementGroup": True,
                                "provisioningState": "Succeeded"}} for n, s in self.scale_sets.items()]
        half = len(sets) // 2
        if token is None:
            return {"value": sets[:half], "nextLink": f"{self.base}{GROUP_ID}/providers/Microsoft.Compute/"
                                                      "virtualMachineScaleSets?api-version=2024-07-01&$skiptoken=p2"}
        return {"value": sets[half:]}

    def instance(self, scale_set: str, instance_id: str, v: dict) -> dict:
        rid = f"{self.scale_sets[scale_set]['id']}/virtualMachines/{instance_id}"
        view = {"platformUpdateDomain": 0, "platformFaultDomain": 0,
                "statuses": statuses(v["power"], v.get("provisioned"))}
        if v.get("computer"):
            view["computerName"] = v["computer"]
        return {"name": f"{scale_set}_{instance_id}", "id": rid, "instanceId": instance_id,
                "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines", "location": LOCATION,
                "properties": {"latestModelApplied": True, "provisioningState": "Succeeded", "instanceView": view,
                               **({"timeCreated": iso(v["created"])} if v.get("created") else {})}}

    def metrics(self, scale_set: str, query: dict) -> dict:
        assert query["metricnames"] == "Percentage CPU" and query["aggregation"] == "Average"
        assert query["interval"] == "PT5M" and query.get("$filter") == "VMName eq '*'"
        lines = [{"metadatavalues": [{"name": {"value": "vmname", "localizedValue": "vmname"}, "value": vm}],
                  "data": [{"timeStamp": f"2026-07-20T07:{5 * k:02d}:00Z", "average": value}
                           for k, value in enumerate(values)] + [{"timeStamp": "2026-07-20T07:55:00Z"}]}
                 for vm, values in self.cpu.get(scale_set, {}).items()]
        return {"cost": 0, "timespan": query["timespan"], "interval": "PT5M", "namespace":
                "Microsoft.Compute/virtualMachineScaleSets", "resourceregion": LOCATION,
                "value": [{"id": "x", "type": "Microsoft.Insights/metrics", "unit": "Percent", "errorCode": "Success",
                           "name": {"value": "Percentage CPU", "localizedValue": "Percentage CPU"},
                           "timeseries": lines}]}

    def accepted(self, request):
        operation = (f"{self.base}/subscriptions/{SUB}/providers/Microsoft.Compute/locations/{LOCATION}/operations/"
                     f"{uuid.uuid4()}?p=1&api-version=2024-07-01")
        request.send_response(202)
        request.send_header("Azure-AsyncOperation", operation)
        request.send_header("Location", operation + "&monitor=true")
        request.send_header("Retry-After", "10")
        request.send_header("Content-Length", "0")
        request.end_headers()

    @staticmethod
    def send(request, status: int, body) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=utf-8")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)


BUDGET = f"goldenenv-{PROJECT}-{STACK}"


def statuses(power: str, provisioned: datetime | None) -> list[dict]:
    found = [{"code": "ProvisioningState/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded",
              **({"time": iso(provisioned)} if provisioned else {})}]
    if power:
        found.append({"code": f"PowerState/{power}", "level": "Info", "displayStatus": f"VM {power}"})
    return found


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def ephemeral(os_disk: dict) -> bool:
    """An OS disk on the host's local storage (diffDiskSettings, the program's diff_disk_settings)."""
    return bool(os_disk.get("diff_disk_settings") or os_disk.get("diffDiskSettings"))


EPHEMERAL_DEALLOCATE = ("Operation 'deallocate' is not supported for VMs or VM Scale Set instances using an "
                        "ephemeral OS disk.")
"""Azure refuses to stop-deallocate a VM or scale-set instance with an ephemeral OS disk (learn.microsoft.com
virtual-machines/ephemeral-os-disks, "VMs and scale set instances cannot be stop-deallocated"; asked and answered in
MicrosoftDocs/azure-docs#41362). Local NVMe data disks (ND H100 v5's eight) do not block it: their data is lost.
The message's wording is this fake's; the code is ARM's for an operation a resource does not allow."""


def node(power: str = "running", started_hours_ago: float | None = 1.0, computer: str | None = None,
         created_hours_ago: float | None = 300.0) -> dict:
    return {"power": power, "computer": computer,
            "provisioned": NOW - timedelta(hours=started_hours_ago) if started_hours_ago is not None else None,
            "created": NOW - timedelta(hours=created_hours_ago) if created_hours_ago is not None else None}


@pytest.fixture
def arm():
    fake = FakeArm()
    fake.scale_set("gpu", {"0": node(), "1": node(), "2": node("deallocated")})
    fake.scale_set("theirs", {"0": node()}, tags={**TAGS, "goldenenv:stack": "azure-other"})
    fake.scale_set("other-project", {"0": node()}, tags={**TAGS, "project": "other-team"})
    fake.scale_set("cpu", {"0": node(), "1": node("stopped")}, tags={"Project": PROJECT, "GOLDENENV:STACK": STACK})
    fake.scale_set("untagged", {"0": node()}, tags={})
    fake.vm("head", created=NOW - timedelta(hours=300), provisioned=NOW - timedelta(hours=1))
    fake.vm("their-head", tags={**TAGS, "goldenenv:stack": "azure-other"})
    fake.vm("jumpbox", tags={})
    yield fake
    fake.close()


MINE = [("cpu", ["0", "1"]), ("gpu", ["0", "1"]), ("head", None)]


def common_alert(name: str = BUDGET, kind: str = "Actual") -> bytes:
    return json.dumps({"schemaId": "azureMonitorCommonAlertSchema", "data": {
        "essentials": {"monitoringService": "CostAlerts", "firedDateTime": "2026-07-20T07:13:20.645Z",
                       "description": f"Your spend for budget {name} is now $1,200.50 exceeding your specified "
                                      "threshold $1,000.00.",
                       "essentialsVersion": "1.0", "alertContextVersion": "1.0",
                       "alertId": f"/subscriptions/{SUB}/providers/Microsoft.CostManagement/alerts/Test_Alert",
                       "alertRule": None, "severity": None, "signalType": None, "monitorCondition": None,
                       "alertTargetIDs": None, "configurationItems": ["budgets"], "originAlertId": None},
        "alertContext": {"AlertCategory": "budgets", "AlertData": {
            "Scope": f"/subscriptions/{SUB}/", "ThresholdType": kind, "BudgetType": "Cost",
            "BudgetThreshold": "$1,000.00", "NotificationThresholdAmount": "$1,000.00", "BudgetName": name,
            "BudgetId": f"/subscriptions/{SUB}/providers/Microsoft.Consumption/budgets/{name}",
            "BudgetStartDate": "2026-07-01", "BudgetCreator": "ml-infra@example.com", "Unit": "USD",
            "SpentAmount": "$1,200.50"}}}}).encode()


def legacy_alert(name: str = BUDGET) -> bytes:
    return json.dumps({"schemaId": "AIP Budget Notification", "data": {
        "SubscriptionName": "training", "SubscriptionId": SUB, "EnrollmentNumber": "", "DepartmentName": "",
        "AccountName": "", "BillingAccountId": "", "BillingProfileId": "", "InvoiceSectionId": "",
        "ResourceGroup": "", "SpendingAmount": "1200.5", "BudgetStartDate": "7/1/2026 12:00:00 AM -00:00",
        "Budget": "1000", "Unit": "USD", "BudgetCreator": "ml-infra@example.com", "BudgetName": name,
        "BudgetType": "Cost", "NotificationThresholdAmount": "1000.0"}}).encode()


def test_an_alert_over_budget_deallocates_only_the_stacks_tagged_scale_sets_and_vms(arm, caplog):
    caplog.set_level(logging.INFO, "goldenenv.stopfn")
    report = stopfn.run_alert(common_alert(), arm.env(), NOW)
    assert arm.deallocations() == MINE and report.failed == []
    assert sorted(report.deallocated) == ["cpu/0", "cpu/1", "gpu/0", "gpu/1", "head"]
    assert not [c for c in arm.calls if c[1].endswith(("/powerOff", "/start", "/restart", "/delete"))]
    assert [q.get("$skiptoken") for m, p, q, _ in arm.calls if p.endswith("/virtualMachineScaleSets")] == [None, "p2"]
    assert TOKEN not in caplog.text and IDENTITY_HEADER not in caplog.text
    assert "spend 1,200.50 USD of 1,000.00: at or over the limit" in caplog.text


def test_the_budgets_own_alert_schema_works_too(arm):
    stopfn.run_alert(legacy_alert(), arm.env(), NOW)
    assert arm.deallocations() == MINE


@pytest.mark.parametrize("body", [common_alert("someone-elses-budget"), legacy_alert("another"),
                                  common_alert(kind="Forecasted")])
def test_an_alert_for_another_budget_or_a_forecast_is_ignored(arm, body):
    report = stopfn.run_alert(body, arm.env(), NOW)
    assert arm.deallocations() == [] and report.failed == []
    assert not [c for c in arm.calls if "Consumption" in c[1]]


def test_an_alert_is_checked_against_the_budget_so_a_raised_limit_or_a_forged_call_stops_nothing(arm):
    arm.budget = {"amount": 2000.0, "spend": 1200.5, "unit": "USD"}
    assert stopfn.run_alert(common_alert(), arm.env(), NOW).deallocated == []
    arm.budget = {"amount": 1000.0, "spend": 1200.5, "unit": "USD"}
    assert stopfn.run_alert(common_alert(), arm.env(**{stopfn.BUDGET_LIMIT_ENV: "1500.00"}), NOW).deallocated == []
    arm.budget = {"amount": 1000.0, "spend": 10.0, "unit": "USD"}
    assert stopfn.run_alert(b"{not json", arm.env(), NOW).deallocated == []
    assert arm.deallocations() == []


@pytest.mark.parametrize("body", [b"", b"[1, 2]", b"{not json", json.dumps({"schemaId": "x", "data": {}}).encode()])
def test_an_unreadable_alert_over_budget_deallocates(arm, body, caplog):
    caplog.set_level(logging.INFO, "goldenenv.stopfn")
    stopfn.run_alert(body, arm.env(), NOW)
    assert arm.deallocations() == MINE
    assert "the alert cannot be read" in caplog.text


@pytest.mark.parametrize("answer,why", [
    (None, "properties.currentSpend.amount is missing"),
    ({"amount": 1000.0, "spend": "NaN", "unit": "USD"}, "not a finite amount"),
    ({"amount": 1000.0, "spend": 5.0, "unit": "EUR"}, "in 'EUR', the limit in 'USD'"),
])
def test_an_alert_fails_closed_when_the_budget_answers_but_cannot_be_judged(arm, answer, why, caplog):
    arm.budget = answer
    report = stopfn.run_alert(common_alert(), arm.env(), NOW)
    assert arm.deallocations() == MINE and report.failed == []
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "treated as over" in errors[0] and why in errors[0]


@pytest.mark.parametrize("answer", [403, 404, 503])
def test_an_alert_whose_budget_read_fails_deallocates_nothing_and_fails_the_call(arm, answer, monkeypatch, caplog):
    """The caller is anonymous: a budget that cannot be read never lets it deallocate a stack; the failed call
    (HTTP 500) is what the stop-failure alert emails to the contacts."""
    arm.budget = answer
    for key, value in arm.env().items():
        monkeypatch.setenv(key, value)
    status, answered = stopfn.handle_alert(common_alert())
    assert status == 500 and answered["deallocated"] == [] and arm.deallocations() == []
    assert f"HTTP {answer}" in answered["failed"][0]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "nothing is deallocated" in errors[0]


def test_the_timer_fails_closed_on_a_budget_that_answers_in_another_currency(arm):
    arm.budget = {"amount": 1000.0, "spend": 5.0, "unit": "EUR"}
    report = stopfn.run_timer(arm.env(), NOW)
    assert arm.deallocations() == MINE and report.failed == []


def test_a_transient_budget_failure_stops_nothing_and_fails_the_call_so_it_is_retried(arm, monkeypatch):
    arm.budget = 503
    for key, value in arm.env().items():
        monkeypatch.setenv(key, value)
    status, answer = stopfn.handle_alert(common_alert())
    assert status == 500 and answer["deallocated"] == [] and "HTTP 503" in answer["failed"][0]
    assert arm.deallocations() == []


def test_with_the_hard_stop_off_an_alert_does_nothing(arm):
    stopfn.run_alert(common_alert(), arm.env(**{stopfn.HARD_STOP_ENV: "false"}), NOW)
    assert arm.deallocations() == [] and arm.calls == []


def test_a_second_alert_deallocates_nothing_twice(arm):
    stopfn.run_alert(common_alert(), arm.env(), NOW)
    again = stopfn.run_alert(common_alert(), arm.env(), NOW)
    assert arm.deallocations() == MINE and again.deallocated == [] and again.failed == []


def test_the_timer_repeats_the_hard_stop_while_the_month_is_over_the_limit(arm):
    report = stopfn.run_timer(arm.env(), NOW)
    assert arm.deallocations() == MINE and report.failed == []
    arm.calls.clear()
    arm.budget = {"amount": 1000.0, "spend": 999.99, "unit": "USD"}
    assert stopfn.run_timer(arm.env(), NOW).deallocated == [] and arm.deallocations() == []


def test_the_timer_stops_nothing_for_a_budget_it_cannot_read(arm):
    arm.budget = 404
    report = stopfn.run_timer(arm.env(), NOW)
    assert arm.deallocations() == [] and "cannot be read" in report.failed[0]


def test_the_time_to_live_counts_from_the_last_start_and_acts_only_when_due(arm):
    arm.budget = {"amount": 1000.0, "spend": 10.0, "unit": "USD"}
    arm.scale_sets["gpu"]["instances"] = {"0": node(started_hours_ago=30), "1": node(started_hours_ago=2),
                                          "2": node(started_hours_ago=None, created_hours_ago=25),
                                          "3": node("deallocated", started_hours_ago=100)}
    arm.scale_sets["cpu"]["instances"] = {"0": node(started_hours_ago=23.9)}
    report = stopfn.run_timer(arm.env(**{stopfn.TTL_HOURS_ENV: "24"}), NOW)
    assert arm.deallocations() == [("gpu", ["0", "2"])] and report.failed == []
    later = stopfn.run_timer(arm.env(**{stopfn.TTL_HOURS_ENV: "24"}), NOW + timedelta(hours=23))
    assert sorted(later.deallocated) == ["cpu/0", "gpu/1", "head"]


def test_a_node_without_a_start_time_is_skipped_and_reported(arm):
    arm.scale_sets["gpu"]["instances"] = {"0": node(started_hours_ago=None, created_hours_ago=None)}
    report = stopfn.run_timer(arm.env(**{stopfn.TTL_HOURS_ENV: "1", stopfn.HARD_STOP_ENV: "false"}), NOW)
    assert ("gpu", ["0"]) not in arm.deallocations() and "gpu/0" in report.failed[0]


def test_idle_instances_are_deallocated_busy_unmeasured_or_new_ones_kept_and_the_head_with_the_last(arm):
    env = arm.env(**{stopfn.HARD_STOP_ENV: "false", stopfn.IDLE_MINUTES_ENV: "30",
                     stopfn.IDLE_CPU_PERCENT_ENV: "0.5"})
    arm.scale_sets["gpu"]["instances"] = {"0": node(started_hours_ago=3), "1": node(started_hours_ago=3),
                                          "2": node(started_hours_ago=3), "3": node(started_hours_ago=0.2)}
    arm.scale_sets["cpu"]["instances"] = {"0": node(started_hours_ago=3, computer="cpu000000")}
    arm.cpu = {"gpu": {"gpu_0": [0.1] * 6, "gpu_1": [0.1] * 5 + [3.0], "gpu_3": [0.0] * 6},
               "cpu": {"cpu000000": [0.2] * 6}}
    report = stopfn.run_timer(env, NOW)
    assert arm.deallocations() == [("cpu", ["0"]), ("gpu", ["0"])] and report.failed == []

    arm.calls.clear()
    arm.cpu["gpu"] = {"gpu_1": [0.1] * 6, "gpu_2": [0.1] * 6, "gpu_3": [0.1] * 6}
    report = stopfn.run_timer(env, NOW + timedelta(hours=1))
    assert arm.deallocations() == [("gpu", ["1", "2", "3"]), ("head", None)]


def test_the_idle_threshold_is_half_a_core_capped_at_five_percent():
    assert budget.idle_cpu_percent(96) == pytest.approx(50 / 96)
    assert budget.idle_cpu_percent(4) == 5.0
    assert budget.idle_cpu_percent(None) == stopfn.DEFAULT_IDLE_CPU_PERCENT


def test_the_identity_endpoint_is_asked_with_its_header_and_a_next_link_elsewhere_is_not_followed(arm):
    api = stopfn.Arm(arm.env())
    assert api.token() == TOKEN
    with pytest.raises(stopfn.ApiError, match="HTTP 400"):
        stopfn.Arm(arm.env(**{stopfn.IDENTITY_HEADER_ENV: "wrong"})).token()
    with pytest.raises(stopfn.ApiError, match="IDENTITY_ENDPOINT or IDENTITY_HEADER"):
        stopfn.Arm({k: v for k, v in arm.env().items() if k != stopfn.IDENTITY_ENDPOINT_ENV}).token()
    with pytest.raises(stopfn.ApiError, match="outside Azure Resource Manager"):
        api.url("https://attacker.example/subscriptions/x")


def test_a_failed_listing_fails_the_timer_run_without_deallocating(arm, monkeypatch):
    for key, value in arm.env(**{stopfn.RESOURCE_GROUP_ENV: "rg-missing", stopfn.TTL_HOURS_ENV: "1",
                                 stopfn.HARD_STOP_ENV: "false"}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(stopfn, "utc_now", lambda: NOW)
    with pytest.raises(RuntimeError, match="cannot list the stack's VMs.*ResourceNotFound"):
        stopfn.handle_timer()
    assert arm.deallocations() == []
