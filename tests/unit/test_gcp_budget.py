"""Google Cloud's budget with a hard stop: the BudgetStop component under Pulumi's mocks, and its stop function
run against a local fake of the metadata server, Compute Engine and Cloud Monitoring.

The fake answers in the shapes Google documents: the metadata server's token ({"access_token", "expires_in",
"token_type"}, 403 without ``Metadata-Flavor: Google``), instances.aggregatedList (``items`` keyed by
``zones/<zone>``, each with ``instances`` or a NO_RESULTS_ON_PAGE ``warning``, paged by ``nextPageToken``),
instances.stop (a zonal ``compute#operation``), machineTypes.get (``guestCpus``), projects.timeSeries.list
(``timeSeries[].points[].value.doubleValue``) and Google's error body ({"error": {"code", "message", "status"}}).
It returns every instance whatever the filter, so the function's own label check is what keeps other stacks'
nodes running; a stopped node reads TERMINATED afterwards, as it does once its operation is done.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import sys
import threading
import types
import urllib.parse
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from goldenenv import catalog, spec
from goldenenv.clouds.gcp import budget
from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp.stopfn import main as stopfn

import stopfakes

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PROJECT, STACK, GCP_PROJECT, NUMBER, BILLING = ("llm-pretrain", "gcp-a3-2node", "acme-train-1", "123456789012",
                                                "01ABCD-23EF45-6789AB")
REGION, ZONE = "us-central1", "us-central1-a"
LABELS = {"goldenenv_stack": STACK, "project": PROJECT, "owner": "ml-infra", "cost-center": "research"}
NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
TOKEN = "ya29.c.fake-access-token"


# ---------------------------------------------------------------- the component under mocks

@pytest.fixture(autouse=True)
def simulated_time(monkeypatch):
    """The stop core's backoffs and waits run on simulated time: a retried call never really sleeps."""
    monkeypatch.setattr(stopfn, "new_clock", stopfakes.simulated_clock)


class MockCloud:
    plan_mock = staticmethod(budget.plan_mock)

    @staticmethod
    def plan_call(args):
        return None


def args_of(**changes) -> budget.BudgetStopArgs:
    import pulumi

    values = dict(project=PROJECT, stack=STACK, gcp_project=pulumi.Output.from_input(GCP_PROJECT),
                  billing_account=pulumi.Output.from_input(BILLING), project_number=pulumi.Output.from_input(NUMBER),
                  monthly_limit=25_000.5, currency="USD", thresholds=[80, 50, 100, 50],
                  emails=["ml-infra@example.com", "finance@example.com"], hard_stop=True, region=REGION,
                  labels=LABELS, ttl_hours=None, idle_minutes=None)
    values.update(changes)
    return budget.BudgetStopArgs(**values)


def planned(**changes) -> tuple[dict[str, list], dict]:
    """Resources by type, and the component's outputs."""
    from goldenenv import plan

    def program():
        stop = budget.BudgetStop("b", args_of(**changes))
        return {"function": stop.function_name, "topic": stop.topic_name, "job": stop.scheduler_job_name,
                "urn": stop.urn}

    records, outputs = plan.record(program, MockCloud())
    by_type: dict[str, list] = {}
    for record in records:
        by_type.setdefault(record.type, []).append(record)
    return by_type, outputs


def one(resources: dict[str, list], typ: str):
    (found,) = resources[typ]
    return found


def test_budget_filters_on_the_project_number_and_the_stack_label_and_alerts_by_email():
    resources, _ = planned()
    b = one(resources, "gcp:billing/budget:Budget").props
    topic = one(resources, "gcp:pubsub/topic:Topic")
    channels = resources["gcp:monitoring/notificationChannel:NotificationChannel"]

    assert b["billingAccount"] == BILLING
    assert b["budgetFilter"]["projects"] == ["projects/123456789012"]
    assert b["budgetFilter"]["labels"] == {"goldenenv_stack": STACK}
    assert b["amount"]["specifiedAmount"] == {"currencyCode": "USD", "units": "25000", "nanos": 500_000_000}
    assert [r["thresholdPercent"] for r in b["thresholdRules"]] == [0.5, 0.8, 1.0]
    assert {r["spendBasis"] for r in b["thresholdRules"]} == {"CURRENT_SPEND"}
    rule = b["allUpdatesRule"]
    assert rule["pubsubTopic"] == f"projects/{GCP_PROJECT}/topics/{topic.props['name']}" == topic.id
    assert rule["schemaVersion"] == "1.0"
    assert sorted(c.props["labels"]["email_address"] for c in channels) == ["finance@example.com",
                                                                             "ml-infra@example.com"]
    assert {c.props["type"] for c in channels} == {"email"}
    assert sorted(rule["monitoringNotificationChannels"]) == sorted(c.id for c in channels)
    assert all(c.id.startswith(f"projects/{GCP_PROJECT}/notificationChannels/") for c in channels)


def test_the_topic_triggers_the_stop_function_which_runs_the_shipped_folder():
    resources, outputs = planned()
    function = one(resources, "gcp:cloudfunctionsv2/function:Function").props
    topic = one(resources, "gcp:pubsub/topic:Topic")
    bucket = one(resources, "gcp:storage/bucket:Bucket").props
    source = one(resources, "gcp:storage/bucketObject:BucketObject").props
    accounts = {a.name: a for a in resources["gcp:serviceaccount/account:Account"]}
    trigger_sa, runner = accounts["b-trigger-sa"], accounts["b-fn-sa"]

    assert outputs["function"] == function["name"] and outputs["topic"] == topic.props["name"]
    assert outputs.get("job") is None  # no time to live, no idle time
    assert function["buildConfig"]["runtime"] == "python312"
    assert function["buildConfig"]["entryPoint"] == "handle" and callable(stopfn.handle)
    assert function["buildConfig"]["source"]["storageSource"] == {"bucket": bucket["name"], "object": source["name"]}
    trigger = function["eventTrigger"]
    assert trigger["eventType"] == "google.cloud.pubsub.topic.v1.messagePublished"
    assert trigger["pubsubTopic"] == topic.id and trigger["triggerRegion"] == REGION
    assert trigger["retryPolicy"] == "RETRY_POLICY_RETRY"
    assert trigger["serviceAccountEmail"] == f"{trigger_sa.props['accountId']}@{GCP_PROJECT}.iam.gserviceaccount.com"
    service = function["serviceConfig"]
    assert service["ingressSettings"] == "ALLOW_INTERNAL_ONLY"
    assert service["serviceAccountEmail"] == f"{runner.props['accountId']}@{GCP_PROJECT}.iam.gserviceaccount.com"
    env = service["environmentVariables"]
    assert env == {"GOLDENENV_GCP_PROJECT": GCP_PROJECT, "GOLDENENV_GCP_PROJECT_NUMBER": NUMBER,
                   "GOLDENENV_PROJECT": PROJECT, "GOLDENENV_STACK": STACK, "GOLDENENV_HARD_STOP": "true",
                   "GOLDENENV_BUDGET_LIMIT": "25000.50", "GOLDENENV_CURRENCY": "USD"}
    assert not any(k in env for k in (stopfn.METADATA_URL_ENV, stopfn.COMPUTE_URL_ENV, stopfn.MONITORING_URL_ENV))

    invoker = one(resources, "gcp:cloudrunv2/serviceIamMember:ServiceIamMember").props
    assert invoker["role"] == "roles/run.invoker" and invoker["name"] == function["name"]
    assert invoker["member"] == f"serviceAccount:{trigger_sa.props['accountId']}@{GCP_PROJECT}.iam.gserviceaccount.com"

    assert bucket["uniformBucketLevelAccess"] is True and bucket["publicAccessPrevention"] == "enforced"
    assert bucket["forceDestroy"] is True and bucket["location"] == REGION
    assert source["name"] == f"stopfn-{budget.source_digest()}.zip"
    assert set(budget.source_archive().assets) == {"main.py", "stopcore.py"}


def test_the_function_holds_a_custom_role_with_only_the_listed_permissions():
    resources, _ = planned()
    role = one(resources, "gcp:projects/iAMCustomRole:IAMCustomRole")
    member = one(resources, "gcp:projects/iAMMember:IAMMember").props
    runner = next(a for a in resources["gcp:serviceaccount/account:Account"] if a.name == "b-fn-sa")

    assert sorted(role.props["permissions"]) == ["compute.instances.get", "compute.instances.list",
                                                 "compute.instances.stop", "compute.zoneOperations.get"]
    assert member["role"] == role.id == f"projects/{GCP_PROJECT}/roles/{role.props['roleId']}"
    assert member["member"] == f"serviceAccount:{runner.props['accountId']}@{GCP_PROJECT}.iam.gserviceaccount.com"
    assert all(ch.isalnum() or ch in "_." for ch in role.props["roleId"])
    bindings = ("gcp:projects/iAMMember:IAMMember", "gcp:pubsub/topicIAMMember:TopicIAMMember",
                "gcp:cloudrunv2/serviceIamMember:ServiceIamMember")
    roles = [m.props["role"] for t in bindings for m in resources.get(t, [])]
    assert "roles/compute.instanceAdmin.v1" not in roles and "roles/owner" not in roles


def test_the_idle_stop_adds_only_reading_machine_types_and_cpu_series():
    resources, outputs = planned(idle_minutes=30, ttl_hours=None)
    role = one(resources, "gcp:projects/iAMCustomRole:IAMCustomRole")
    assert sorted(role.props["permissions"]) == sorted([*budget.STOP_PERMISSIONS, "compute.machineTypes.get",
                                                        "monitoring.timeSeries.list"])
    assert outputs["job"] == one(resources, "gcp:cloudscheduler/job:Job").props["name"]


def test_every_labelled_resource_carries_the_stacks_labels_and_every_child_is_the_components():
    resources, outputs = planned(ttl_hours=12)
    for typ in ("gcp:pubsub/topic:Topic", "gcp:cloudfunctionsv2/function:Function"):
        assert one(resources, typ).props["labels"] == LABELS, typ
    # the source bucket also says it holds only the function's code, which exempts it from retention
    assert one(resources, "gcp:storage/bucket:Bucket").props["labels"] == {**LABELS, "goldenenv-holds": "function-code"}
    for channel in resources["gcp:monitoring/notificationChannel:NotificationChannel"]:
        assert channel.props["userLabels"] == LABELS
    children = [r for rs in resources.values() for r in rs if r.type != "goldenenv:gcp:BudgetStop"]
    assert children and all(r.parent_urn == outputs["urn"] for r in children)


def test_a_time_to_live_adds_a_schedule_that_publishes_reaper_messages_as_the_scheduler_agent_only():
    resources, outputs = planned(ttl_hours=12, hard_stop=False)
    job = one(resources, "gcp:cloudscheduler/job:Job").props
    topic = one(resources, "gcp:pubsub/topic:Topic")
    publisher = one(resources, "gcp:pubsub/topicIAMMember:TopicIAMMember").props
    function = one(resources, "gcp:cloudfunctionsv2/function:Function").props

    assert outputs["job"] == job["name"]
    assert job["schedule"] == "*/15 * * * *" and job["region"] == REGION
    assert job["pubsubTarget"]["topicName"] == topic.id
    assert job["pubsubTarget"]["attributes"] == {stopfn.MODE_ATTRIBUTE: stopfn.REAPER_MODE}
    assert publisher == {**publisher, "topic": topic.props["name"], "role": "roles/pubsub.publisher",
                         "member": f"serviceAccount:service-{NUMBER}@gcp-sa-cloudscheduler.iam.gserviceaccount.com"}
    env = function["serviceConfig"]["environmentVariables"]
    assert env["GOLDENENV_TTL_HOURS"] == "12" and env["GOLDENENV_HARD_STOP"] == "false"
    assert "pubsubTopic" not in one(resources, "gcp:billing/budget:Budget").props["allUpdatesRule"]


def test_without_hard_stop_ttl_or_idle_the_budget_only_emails():
    resources, outputs = planned(hard_stop=False)
    assert "gcp:cloudfunctionsv2/function:Function" not in resources and "gcp:pubsub/topic:Topic" not in resources
    assert "gcp:projects/iAMCustomRole:IAMCustomRole" not in resources
    assert outputs.get("function") is None and outputs.get("topic") is None
    rule = one(resources, "gcp:billing/budget:Budget").props["allUpdatesRule"]
    assert "pubsubTopic" not in rule and len(rule["monitoringNotificationChannels"]) == 2


@pytest.mark.parametrize("duty", [{"hard_stop": True}, {"hard_stop": False, "ttl_hours": 12},
                                  {"hard_stop": False, "idle_minutes": 30}])
def test_a_failing_stop_function_alerts_the_budgets_email_channels(duty):
    resources, _ = planned(**duty)
    function = one(resources, "gcp:cloudfunctionsv2/function:Function").props
    policy = one(resources, "gcp:monitoring/alertPolicy:AlertPolicy").props
    channels = resources["gcp:monitoring/notificationChannel:NotificationChannel"]
    (condition,) = policy["conditions"]
    assert condition["conditionMatchedLog"]["filter"] == (
        f'resource.type = "cloud_run_revision" AND resource.labels.service_name = "{function["name"]}" '
        "AND severity >= ERROR")
    assert sorted(policy["notificationChannels"]) == sorted(c.id for c in channels)
    assert sorted(c.props["labels"]["email_address"] for c in channels) == ["finance@example.com",
                                                                             "ml-infra@example.com"]
    assert policy["alertStrategy"]["notificationRateLimit"]["period"] == "3600s"  # required by a log-match alert
    assert policy["userLabels"] == LABELS and policy["combiner"] == "OR"


def test_without_a_stop_function_there_is_no_failure_alert():
    resources, _ = planned(hard_stop=False)
    assert "gcp:monitoring/alertPolicy:AlertPolicy" not in resources


def test_more_emails_than_a_budget_takes_is_refused():
    with pytest.raises(ValueError, match="at most 5"):
        planned(emails=[f"a{i}@example.com" for i in range(6)])


@pytest.mark.parametrize("project,stack", [("p", "s"), ("P_roj ect", "dev"), ("x" * 80, "y" * 80)])
def test_names_fit_googles_rules(project, stack):
    args = args_of(project=project, stack=stack)
    account = budget.stop_name(args, "trigger", limit=budget.SERVICE_ACCOUNT_ID_MAX)
    assert 6 <= len(account) <= 30 and gcp_labels.NAME.match(account)
    assert len(budget.role_id(args)) <= 64 and all(ch.isalnum() or ch == "_" for ch in budget.role_id(args))
    assert len(budget.source_bucket_name(GCP_PROJECT, project, stack)) <= 63


def test_the_function_ships_alone_importing_nothing_but_the_standard_library():
    tree = ast.parse(Path(stopfn.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    # the stop core: goldenenv.clouds.stopcore here, stopcore in the package (test_stop_packages runs it alone)
    assert imported - {"functions_framework", "goldenenv", "stopcore"} <= set(sys.stdlib_module_names) | {"__future__"}


def test_label_keys_and_mode_agree_with_the_program():
    assert stopfn.STACK_LABEL_KEY == gcp_labels.label_key(spec.STACK_TAG_KEY) == budget.STACK_LABEL_KEY
    assert stopfn.PROJECT_LABEL_KEY == budget.PROJECT_LABEL_KEY
    resolved = gcp_labels.labels(spec.Tags(project=PROJECT, owner="ml", cost_center="cc").resolved(STACK))
    assert resolved[stopfn.PROJECT_LABEL_KEY] == PROJECT and resolved[stopfn.STACK_LABEL_KEY] == STACK
    assert (stopfn.MODE_ATTRIBUTE, stopfn.REAPER_MODE) == (budget.MODE_ATTRIBUTE, budget.REAPER_MODE)
    env = budget.function_environment(args_of(ttl_hours=1.5, idle_minutes=30))
    names = {v for k, v in vars(stopfn).items() if k.endswith("_ENV")}
    assert set(env) <= names


# ---------------------------------------------------------------- the function against a fake Google

def instance(name: str, status: str, stack: str = STACK, project: str = PROJECT, zone: str = ZONE,
             started_hours_ago: float | None = 1.0, created_hours_ago: float = 200.0,
             machine_type: str = "a3-highgpu-8g") -> dict:
    """An instance as instances.aggregatedList lists it, with its boot disk and, as the catalog says its machine
    type has, Local SSD (attached disks of type SCRATCH on NVMe)."""
    link = f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}/zones/{zone}"
    local_ssd = catalog.instance_type("gcp", machine_type)
    disks = [{"kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE", "boot": True, "index": 0,
              "interface": "NVME", "autoDelete": True, "deviceName": name, "source": f"{link}/disks/{name}"}]
    disks += [{"kind": "compute#attachedDisk", "type": "SCRATCH", "mode": "READ_WRITE", "boot": False, "index": k + 1,
               "interface": "NVME", "autoDelete": True, "deviceName": f"local-nvme-ssd-{k}",
               "diskSizeGb": str(local_ssd.local_nvme_gib)}
              for k in range(local_ssd.local_nvme_count)]
    found = {
        "kind": "compute#instance", "id": str(abs(hash(name)) % 10**19), "name": name, "status": status,
        "zone": link, "machineType": f"{link}/machineTypes/{machine_type}", "selfLink": f"{link}/instances/{name}",
        "disks": disks,
        "creationTimestamp": (NOW - timedelta(hours=created_hours_ago)).astimezone(
            timezone(timedelta(hours=-7))).isoformat(timespec="milliseconds"),
        "labels": {"goldenenv_stack": stack, "project": project, "owner": "ml-infra"},
    }
    if started_hours_ago is not None:
        found["lastStartTimestamp"] = (NOW - timedelta(hours=started_hours_ago)).astimezone(
            timezone(timedelta(hours=-7))).isoformat(timespec="milliseconds")
    return found


class FakeGoogle:
    """The metadata server, Compute Engine v1 and Cloud Monitoring v3 on one local port."""

    def __init__(self, instances: list[dict], cpu: dict[str, list[float]] | None = None,
                 refuse_stop: frozenset[str] = frozenset()):
        self.instances = {i["name"]: i for i in instances}
        self.cpu = cpu or {}
        self.refuse_stop = refuse_stop
        self.calls: list[tuple[str, str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                fake.answer(self, "GET")

            def do_POST(self):  # noqa: N802
                fake.answer(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def env(self, **extra) -> dict[str, str]:
        return {stopfn.GCP_PROJECT_ENV: GCP_PROJECT, stopfn.PROJECT_ENV: PROJECT, stopfn.STACK_ENV: STACK,
                stopfn.HARD_STOP_ENV: "true", stopfn.BUDGET_LIMIT_ENV: "1000.00", stopfn.CURRENCY_ENV: "USD",
                stopfn.METADATA_URL_ENV: f"{self.base}/computeMetadata/v1",
                stopfn.COMPUTE_URL_ENV: f"{self.base}/compute/v1", stopfn.MONITORING_URL_ENV: f"{self.base}/v3",
                **extra}

    def stops(self) -> list[str]:
        return [path.split("/instances/")[1].removesuffix("/stop") for method, path, _ in self.calls
                if method == "POST" and path.endswith("/stop")]

    def answer(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(request.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.calls.append((method, url.path, query))
        path = url.path
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            if request.headers.get("Metadata-Flavor") != "Google":
                return self.send(request, 403, "Missing Metadata-Flavor:Google header.", raw=True)
            return self.send(request, 200, {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.send(request, 401, error(401, "UNAUTHENTICATED", "Request had invalid credentials."))
        prefix = f"/compute/v1/projects/{GCP_PROJECT}"
        if method == "GET" and path == f"{prefix}/aggregated/instances":
            return self.send(request, 200, self.aggregated(query.get("pageToken")))
        if method == "GET" and "/machineTypes/" in path:
            return self.send(request, 200, {"kind": "compute#machineType", "name": path.rsplit("/", 1)[1],
                                            "guestCpus": 208, "memoryMb": 1916928})
        if method == "POST" and path.startswith(f"{prefix}/zones/") and path.endswith("/stop"):
            zone, name = path.split("/zones/")[1].split("/instances/")
            name = name.removesuffix("/stop")
            if name in self.refuse_stop:
                return self.send(request, 503, error(503, "UNAVAILABLE", "The service is currently unavailable."))
            if has_local_ssd(self.instances[name]) and query.get("discardLocalSsd") not in ("true", "false"):
                return self.send(request, 400, LOCAL_SSD_UNDECIDED)
            self.instances[name]["status"] = "TERMINATED"
            link = f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}/zones/{zone}"
            return self.send(request, 200, {
                "kind": "compute#operation", "id": "7001", "name": f"operation-1753000000000-stop-{name}",
                "zone": link, "operationType": "stop", "targetLink": f"{link}/instances/{name}", "status": "RUNNING",
                "progress": 0, "user": f"stop@{GCP_PROJECT}.iam.gserviceaccount.com",
                "insertTime": "2026-07-20T01:00:00.000-07:00", "selfLink": f"{link}/operations/op-{name}"})
        if method == "GET" and path == f"/v3/projects/{GCP_PROJECT}/timeSeries":
            wanted = query["filter"].split('resource.labels.instance_id = "')[1].rstrip('"')
            named = {i["id"]: n for n, i in self.instances.items()}
            values = self.cpu.get(named.get(wanted, ""), [])
            points = [{"interval": {"startTime": f"2026-07-20T07:{55 - 5 * k:02d}:00Z",
                                    "endTime": f"2026-07-20T07:{55 - 5 * k:02d}:00Z"},
                       "value": {"doubleValue": v}} for k, v in enumerate(values)]
            series = [{"metric": {"type": stopfn.CPU_METRIC, "labels": {"instance_name": named.get(wanted, "")}},
                       "resource": {"type": "gce_instance", "labels": {"instance_id": wanted, "zone": ZONE,
                                                                       "project_id": GCP_PROJECT}},
                       "metricKind": "GAUGE", "valueType": "DOUBLE", "points": points}] if points else []
            return self.send(request, 200, {"timeSeries": series} if series else {})
        return self.send(request, 404, error(404, "NOT_FOUND", f"The resource '{path}' was not found"))

    def aggregated(self, page: str | None) -> dict:
        """Page 1: zone a's first half and an empty zone; page 2: the rest."""
        everything = list(self.instances.values())
        half = len(everything) // 2
        common = {"kind": "compute#instanceAggregatedList", "id": f"projects/{GCP_PROJECT}/aggregated/instances",
                  "selfLink": f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}/aggregated/instances"}
        if not page:
            return {**common, "nextPageToken": "CkQIkPKxo", "items": {
                f"zones/{ZONE}": {"instances": everything[:half]},
                "zones/us-east1-b": {"warning": {"code": "NO_RESULTS_ON_PAGE",
                                                 "message": "There are no results for scope 'zones/us-east1-b' on "
                                                            "this page.",
                                                 "data": [{"key": "scope", "value": "zones/us-east1-b"}]}}}}
        return {**common, "items": {f"zones/{ZONE}": {"instances": everything[half:]}}}

    @staticmethod
    def send(request: BaseHTTPRequestHandler, status: int, body, raw: bool = False) -> None:
        data = body.encode() if raw else json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "text/plain" if raw else "application/json; charset=UTF-8")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)


def has_local_ssd(found: dict) -> bool:
    return any(d.get("type") == "SCRATCH" for d in found.get("disks") or [])


LOCAL_SSD_MESSAGE = ("VM has a Local SSD attached but an undefined value for `discard-local-ssd`. If using gcloud, "
                     "please add `--discard-local-ssd=false` or `--discard-local-ssd=true` to your command.")
LOCAL_SSD_UNDECIDED = {"error": {"code": 400, "message": LOCAL_SSD_MESSAGE, "status": "INVALID_ARGUMENT",
                                 "errors": [{"message": LOCAL_SSD_MESSAGE, "domain": "global",
                                             "reason": "badRequest"}]}}
"""Compute Engine's answer to instances.stop without discardLocalSsd on a VM with Local SSD, as Google's API
returned it to others (skypilot-org/skypilot#2586, ansible-collections/google.cloud#686)."""


def error(code: int, status: str, message: str) -> dict:
    return {"error": {"code": code, "message": message, "status": status,
                      "errors": [{"message": message, "domain": "global", "reason": status.lower()}]}}


def fleet() -> list[dict]:
    return [
        instance("mine-0", "RUNNING"), instance("mine-1", "STAGING"), instance("mine-2", "TERMINATED"),
        instance("theirs-0", "RUNNING", stack="gcp-other"),
        instance("same-stack-other-project-0", "RUNNING", project="other-team"),
        instance("mine-3", "RUNNING", zone="us-central1-b"),
    ]


@pytest.fixture
def google():
    fake = FakeGoogle(fleet())
    yield fake
    fake.close()


def budget_message(cost=1200.0, amount=1000.0, currency="USD", interval="2026-07-01T07:00:00Z", **extra) -> dict:
    payload = {"budgetDisplayName": "goldenenv-llm-pretrain-gcp-a3-2node", "alertThresholdExceeded": 1.0,
               "costAmount": cost, "costIntervalStart": interval, "budgetAmount": amount,
               "budgetAmountType": "SPECIFIED_AMOUNT", "currencyCode": currency, **extra}
    payload = {k: v for k, v in payload.items() if v is not ...}
    return {"data": base64.b64encode(json.dumps(payload).encode()).decode(), "messageId": "1001",
            "publishTime": "2026-07-20T07:58:00Z",
            "attributes": {"billingAccountId": BILLING, "budgetId": "de72f49d-779b-4945-a127-4d6ce8def0bb",
                           "schemaVersion": "1.0"}}


def reaper_message() -> dict:
    return {"data": base64.b64encode(b'{"goldenenv": "reaper"}').decode(),
            "attributes": {stopfn.MODE_ATTRIBUTE: stopfn.REAPER_MODE}}


MINE_LIVE = ["mine-0", "mine-1", "mine-3"]


def test_over_budget_stops_the_stacks_live_nodes_and_no_others(google, capsys):
    report = stopfn.run(budget_message(cost=1000.0), google.env(), NOW)
    assert sorted(google.stops()) == MINE_LIVE
    assert sorted(report.stopped) == [f"{ZONE}/mine-0", f"{ZONE}/mine-1", "us-central1-b/mine-3"]
    assert report.failed == []
    listings = [q for m, p, q in google.calls if p.endswith("/aggregated/instances")]
    assert listings[0]["filter"] == '(labels.goldenenv_stack = "gcp-a3-2node") (labels.project = "llm-pretrain")'
    assert len(listings) == 2 and listings[1]["pageToken"] == "CkQIkPKxo"
    assert ("POST", f"/compute/v1/projects/{GCP_PROJECT}/zones/us-central1-b/instances/mine-3/stop",
            {"discardLocalSsd": "true"}) in google.calls
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(set(line) == {"severity", "message"} for line in lines)
    assert sum("stop us-central1" in line["message"] for line in lines) == 3
    assert not any(TOKEN in line["message"] for line in lines)


def test_under_budget_nothing_is_stopped(google):
    report = stopfn.run(budget_message(cost=999.99), google.env(), NOW)
    assert google.stops() == [] and report.stopped == [] and report.failed == []


@pytest.mark.parametrize("message,why", [
    ({"data": "not base64 at all!"}, "cannot be read"),
    ({"data": base64.b64encode(b"[1, 2]").decode()}, "not a JSON object"),
    (budget_message(cost=math.nan), "not a finite amount"),
    (budget_message(cost=...), "costAmount is missing"),
    (budget_message(cost="about 5"), "not a number"),
    (budget_message(amount=0), "not a positive amount"),
    (budget_message(cost=1.0, currency="EUR"), "in 'EUR', the limit in 'USD'"),
    ({}, "cannot be read"),
])
def test_a_message_that_cannot_be_read_stops_the_nodes_and_says_why(google, capsys, message, why):
    report = stopfn.run(message, google.env(), NOW)
    assert sorted(google.stops()) == MINE_LIVE and report.failed == []
    errors = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"ERROR"' in x]
    assert len(errors) == 1 and why in errors[0]["message"]


def test_a_second_identical_message_stops_nothing_twice(google):
    message = budget_message(cost=1500.0)
    stopfn.run(message, google.env(), NOW)
    again = stopfn.run(message, google.env(), NOW)
    assert sorted(google.stops()) == MINE_LIVE  # three stops in all, from the first message
    assert again.stopped == [] and again.failed == []


def test_a_budget_raised_by_up_ends_the_hard_stop(google, capsys):
    """The message still carries the old budget; the function was deployed with the raised one."""
    report = stopfn.run(budget_message(cost=1200.0, amount=1000.0), google.env(**{stopfn.BUDGET_LIMIT_ENV: "2000.00"}),
                        NOW)
    assert google.stops() == [] and report.stopped == []
    assert "under the limit" in capsys.readouterr().out


def test_a_message_about_a_past_month_is_ignored(google):
    report = stopfn.run(budget_message(cost=5000.0, interval="2026-06-01T07:00:00Z"), google.env(), NOW)
    assert google.stops() == [] and report.stopped == []


def test_with_the_hard_stop_off_a_budget_message_stops_nothing(google):
    stopfn.run(budget_message(cost=5000.0), google.env(**{stopfn.HARD_STOP_ENV: "false"}), NOW)
    assert google.stops() == []


def test_budget_months_start_at_midnight_pacific():
    july = "2026-07-01T07:00:00Z"  # midnight PDT
    just_after = datetime(2026, 7, 1, 7, 30, tzinfo=timezone.utc)
    assert not stopfn.judge_budget(base64.b64encode(json.dumps({
        "costAmount": 5.0, "budgetAmount": 1.0, "currencyCode": "USD", "costIntervalStart": july}).encode()),
        currency="USD", deployed_limit=None, now=just_after).reason.startswith("a message about")
    june = stopfn.judge_budget(base64.b64encode(json.dumps({
        "costAmount": 5.0, "budgetAmount": 1.0, "currencyCode": "USD",
        "costIntervalStart": "2026-06-01T07:00:00Z"}).encode()), currency="USD", deployed_limit=None,
        now=datetime(2026, 7, 2, tzinfo=timezone.utc))
    assert not june.stop and "2026-06" in june.reason


def test_the_time_to_live_counts_from_the_last_start(google):
    google.instances.clear()
    google.instances.update({i["name"]: i for i in [
        instance("old-start", "RUNNING", started_hours_ago=30, created_hours_ago=300),
        instance("restarted", "RUNNING", started_hours_ago=2, created_hours_ago=300),
        instance("never-restarted", "RUNNING", started_hours_ago=None, created_hours_ago=25),
        instance("other-stack", "RUNNING", stack="gcp-other", started_hours_ago=300),
    ]})
    report = stopfn.run(reaper_message(), google.env(**{stopfn.TTL_HOURS_ENV: "24"}), NOW)
    assert sorted(google.stops()) == ["never-restarted", "old-start"] and report.failed == []


def test_a_budget_message_never_runs_the_time_to_live(google):
    stopfn.run(budget_message(cost=1.0), google.env(**{stopfn.TTL_HOURS_ENV: "0.001"}), NOW)
    assert google.stops() == []


def test_idle_nodes_are_stopped_busy_or_unmeasured_ones_kept():
    fake = FakeGoogle([instance(n, "RUNNING", started_hours_ago=3) for n in ("idle", "busy", "silent")]
                      + [instance("just-started", "RUNNING", started_hours_ago=0.2)],
                      cpu={"idle": [0.001] * 6, "busy": [0.001] * 5 + [0.03], "just-started": [0.0] * 2})
    try:
        report = stopfn.run(reaper_message(), fake.env(**{stopfn.IDLE_MINUTES_ENV: "30"}), NOW)
        assert fake.stops() == ["idle"] and report.failed == []
        series = [q for m, p, q in fake.calls if p.endswith("/timeSeries")]
        assert {q["aggregation.perSeriesAligner"] for q in series} == {"ALIGN_MEAN"}
        assert all(q["filter"].startswith(f'metric.type = "{stopfn.CPU_METRIC}"') for q in series)
    finally:
        fake.close()


def test_idle_means_under_half_a_core_capped_at_five_percent():
    assert stopfn.idle_threshold(208) == pytest.approx(0.5 / 208)
    assert stopfn.idle_threshold(4) == pytest.approx(0.05)


def test_a_failed_stop_fails_the_invocation_after_the_others_are_stopped(monkeypatch, capsys):
    fake = FakeGoogle(fleet(), refuse_stop=frozenset({"mine-1"}))
    try:
        for key, value in fake.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(stopfn, "utc_now", lambda: NOW)
        event = types.SimpleNamespace(data={"message": budget_message(cost=2000.0), "subscription": "projects/x"})
        with pytest.raises(RuntimeError, match="mine-1.*UNAVAILABLE"):
            stopfn.handle(event)
        assert fake.instances["mine-0"]["status"] == fake.instances["mine-3"]["status"] == "TERMINATED"
        assert fake.instances["mine-1"]["status"] == "STAGING"
        assert TOKEN not in capsys.readouterr().out
    finally:
        fake.close()


def test_the_metadata_server_is_asked_with_its_header_only():
    fake = FakeGoogle([])
    try:
        api = stopfn.Google(fake.env())
        assert api.token() == TOKEN
        with pytest.raises(stopfn.ApiError, match="HTTP 403"):
            stopfn.Google._request("GET", f"{fake.base}/computeMetadata/v1/instance/service-accounts/default/token",
                                   {})
    finally:
        fake.close()
