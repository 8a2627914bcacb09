"""Host and storage hardening as a contract over every cloud x shipped stack.

Each stack is planned once for the module; each row copies its resources, turns one protection off the way a
reviewer would refuse (Secure Boot, vTPM or integrity monitoring off on a host, a named reason dropped or unknown,
password login, plain HTTP, TLS 1.0, shared-key access without a reason, a lifecycle rule deleting every object after
a day) and expects its rule to name the resource, as an error. A rule with nothing to judge on a cloud is said as data
in that cloud's folder (its guardrail facts' ``not_judged``), and the last tests hold every cloud to saying so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudfolder
import pytest
import shipped
from test_guardrail_mutations import Plan

from goldenenv import guardrails
from goldenenv.clouds.azure import hardening as azure_hardening
from goldenenv.clouds.gcp import hardening as gcp_hardening
from goldenenv.guardrails import PlannedResource, Severity
from goldenenv.hardening import EXCEPTION_KEY

HOST, STORAGE, LIFECYCLE = "host-not-hardened", "storage-not-hardened", "lifecycle-deletes-data"
HOOKS = {HOST: "host_hardening", STORAGE: "storage_hardening", LIFECYCLE: "data_lifecycle"}
CASES = shipped.pulumi_stacks()
GCP_INSTANCE = "gcp:compute/instance:Instance"
AZURE_ACCOUNT = "azure-native:storage:StorageAccount"


def _in_head(resource: PlannedResource) -> bool:
    return any(t.endswith(":SlurmHead") for t in resource.urn.split("::")[2].split("$")[:-1])


# ---------------------------------------------------------------- mutations

def gcp_shielded(setting: str, *, head: bool = False) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        host = next(r for r in plan.of(GCP_INSTANCE) if _in_head(r)) if head else plan.nodes(GCP_INSTANCE)[0]
        plan.set(host, shieldedInstanceConfig={**host.props["shieldedInstanceConfig"], setting: False})
    return mutate


def gcp_reason(value: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        node = plan.nodes(GCP_INSTANCE)[0]
        labels = {k: v for k, v in node.props["labels"].items() if k != EXCEPTION_KEY}
        plan.set(node, labels={**labels, EXCEPTION_KEY: value} if value else labels)
    return mutate


def azure_password(kind: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        if kind == "scale set":
            host = plan.nodes("azure-native:compute:VirtualMachineScaleSet")[0]
            profile = copy.deepcopy(host.props["virtualMachineProfile"])
            profile["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] = False
            plan.set(host, virtualMachineProfile=profile)
            return
        host = next(r for r in plan.of("azure-native:compute:VirtualMachine") if _in_head(r))
        os_profile = copy.deepcopy(host.props["osProfile"])
        if kind == "head":
            os_profile["linuxConfiguration"]["disablePasswordAuthentication"] = False
        else:
            os_profile["adminPassword"] = "Correct-Horse-1"
        plan.set(host, osProfile=os_profile)
    return mutate


def _azure_host(plan: Plan, kind: str) -> PlannedResource:
    if kind == "scale set":
        return plan.nodes("azure-native:compute:VirtualMachineScaleSet")[0]
    return next(r for r in plan.of("azure-native:compute:VirtualMachine") if _in_head(r))


def azure_security(kind: str, **uefi: Any) -> Callable[[Plan], None]:
    """Change the host's Trusted Launch settings (``uefi``), or remove its security profile (no ``uefi``)."""
    def mutate(plan: Plan) -> None:
        host = _azure_host(plan, kind)
        profile = copy.deepcopy(host.props["virtualMachineProfile"] if kind == "scale set" else host.props)
        if uefi:
            profile["securityProfile"]["uefiSettings"].update(uefi)
        else:
            profile.pop("securityProfile")
        if kind == "scale set":
            plan.set(host, virtualMachineProfile=profile)
        else:
            plan.set(host, securityProfile=profile.get("securityProfile"))
    return mutate


def azure_host_reason(kind: str, value: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        host = _azure_host(plan, kind)
        tags = {k: v for k, v in host.props["tags"].items() if k != EXCEPTION_KEY}
        plan.set(host, tags={**tags, EXCEPTION_KEY: value} if value else tags)
    return mutate


def azure_account(suffix: str, **props: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        account = plan.one(AZURE_ACCOUNT, suffix)
        tags = props.pop("tags", account.props.get("tags"))
        plan.set(account, **props, tags=tags)
    return mutate


def azure_tags_without_reason(suffix: str, reason: str | None = None, **props: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        account = plan.one(AZURE_ACCOUNT, suffix)
        tags = {k: v for k, v in (account.props.get("tags") or {}).items() if k != EXCEPTION_KEY}
        plan.set(account, **props, tags={**tags, EXCEPTION_KEY: reason} if reason else tags)
    return mutate


def delete_everything(provider: str, days: float) -> Callable[[Plan], None]:
    """A lifecycle rule with no prefix that deletes every object of the data store after ``days``, in the resources
    of the provider (ROWS_OF's name for it)."""
    def mutate(plan: Plan) -> None:
        if provider == "gcp":
            bucket = plan.one("gcp:storage/bucket:Bucket", "-data-bucket")
            plan.set(bucket, lifecycleRules=[*(bucket.props.get("lifecycleRules") or ()),
                                             {"action": {"type": "Delete"}, "condition": {"age": days}}])
        elif provider == "tencent":
            bucket = plan.one("tencentcloud:Cos/bucket:Bucket", "-data-bucket")
            plan.set(bucket, lifecycleRules=[*(bucket.props.get("lifecycleRules") or ()),
                                             {"id": "purge", "filterPrefix": "", "expiration": {"days": days}}])
        elif provider == "alicloud":
            bucket = plan.one("alicloud:oss/bucket:Bucket", "-data-bucket")
            plan.set(bucket, lifecycleRules=[*(bucket.props.get("lifecycleRules") or ()),
                                             {"enabled": True, "id": "purge", "prefix": "",
                                              "expirations": [{"days": days}]}])
        elif provider == "huawei":
            bucket = plan.one("huaweicloud:Obs/bucket:Bucket", "-data-bucket")
            plan.set(bucket, lifecycleRules=[*(bucket.props.get("lifecycleRules") or ()),
                                             {"enabled": True, "name": "purge", "expirations": [{"days": days}]}])
        elif provider == "aws":
            bucket = plan.one("aws:s3/bucket:Bucket")
            plan.add("aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2", "purge", {
                "bucket": bucket.id, "rules": [{"id": "purge", "status": "Enabled", "filter": {},
                                                "expiration": {"days": days}}]})
        else:
            policy = plan.one("azure-native:storage:ManagementPolicy")
            rules = [*policy.props["policy"]["rules"], {
                "name": "purge", "enabled": True, "type": "Lifecycle", "definition": {
                    "filters": {"blobTypes": ["blockBlob"]},
                    "actions": {"baseBlob": {"delete": {"daysAfterModificationGreaterThan": days}}}}}]
            plan.set(policy, policy={"rules": rules})
    return mutate


@dataclass(frozen=True)
class Row:
    id: str
    clouds: tuple[str, ...]
    rule: str
    mutate: Callable[[Plan], None] | Callable[[str], Callable[[Plan], None]]
    per_cloud: bool = False
    """``mutate`` takes the provider's name (ROWS_OF's) and returns the mutation."""


def _plans_lustre(plan: Plan) -> bool:
    """Whether the stack plans Azure Managed Lustre (whose blob integration needs shared key on the data account)."""
    return any(r.type.startswith("azure-native:storagecache:AmlFilesystem") for r in plan.resources)


ALL = ("aws", "alicloud", "gcp", "azure", "tencent", "huawei")
ROWS_OF = {"aws": "aws", "alicloud": "alicloud", "gcp": "gcp", "azure-native": "azure", "tencentcloud": "tencent",
           "huaweicloud": "huawei"}
"""Provider (cloudfolder.provider) -> the name TABLE's rows give it: a row weakens the provider's resources, so it
runs on every cloud built on that provider (a cloud started from a copy of another's folder included)."""


def rows_of(cloud: str) -> str | None:
    return ROWS_OF.get(cloudfolder.provider(cloud))

TABLE: tuple[Row, ...] = (
    Row("gcp-head-secure-boot-off", ("gcp",), HOST, gcp_shielded("enableSecureBoot", head=True)),
    Row("gcp-node-vtpm-off", ("gcp",), HOST, gcp_shielded("enableVtpm")),
    Row("gcp-node-integrity-monitoring-off", ("gcp",), HOST, gcp_shielded("enableIntegrityMonitoring")),
    Row("gcp-head-vtpm-off", ("gcp",), HOST, gcp_shielded("enableVtpm", head=True)),
    Row("gcp-gpu-node-secure-boot-off-without-its-reason", ("gcp",), HOST, gcp_reason(None)),
    Row("gcp-gpu-node-secure-boot-off-with-an-unknown-reason", ("gcp",), HOST, gcp_reason("because")),
    Row("gcp-node-shielded-config-removed", ("gcp",), HOST,
        lambda plan: plan.set(plan.nodes(GCP_INSTANCE)[0], shieldedInstanceConfig=None)),
    Row("azure-scale-set-trusted-launch-removed", ("azure",), HOST, azure_security("scale set")),
    Row("azure-head-trusted-launch-removed", ("azure",), HOST, azure_security("head")),
    Row("azure-scale-set-vtpm-off", ("azure",), HOST, azure_security("scale set", vTpmEnabled=False)),
    Row("azure-head-vtpm-off", ("azure",), HOST, azure_security("head", vTpmEnabled=False)),
    Row("azure-gpu-secure-boot-off-without-its-reason", ("azure",), HOST, azure_host_reason("scale set", None)),
    Row("azure-head-secure-boot-off-with-an-unknown-reason", ("azure",), HOST, azure_host_reason("head", "slow")),
    Row("azure-scale-set-password-login", ("azure",), HOST, azure_password("scale set")),
    Row("azure-head-password-login", ("azure",), HOST, azure_password("head")),
    Row("azure-head-admin-password", ("azure",), HOST, azure_password("password")),
    Row("huawei-node-admin-password", ("huawei",), HOST,
        lambda plan: plan.set((plan.nodes("huaweicloud:Ecs/instance:Instance")
                               or plan.nodes("pulumi-python:dynamic/huawei:DevServer"))[0], adminPass="Correct-Horse-1")),
    Row("alicloud-node-login-password", ("alicloud",), HOST,
        lambda plan: plan.set(plan.nodes("alicloud:ecs/instance:Instance")[0], password="Correct-Horse-1")),
    Row("tencent-node-login-password", ("tencent",), HOST,
        lambda plan: plan.set(plan.nodes("tencentcloud:Instance/instance:Instance")[0], password="Correct-Horse-1")),
    Row("alicloud-head-inherits-the-image-password", ("alicloud",), HOST,
        lambda plan: plan.set(next(r for r in plan.of("alicloud:ecs/instance:Instance") if _in_head(r)),
                              passwordInherit=True)),
    Row("azure-data-account-plain-http", ("azure",), STORAGE,
        azure_account("-data-account", enableHttpsTrafficOnly=False)),
    Row("azure-data-account-tls-1-0", ("azure",), STORAGE, azure_account("-data-account", minimumTlsVersion="TLS1_0")),
    Row("azure-function-account-tls-unset", ("azure",), STORAGE,
        azure_account("-fn-storage", minimumTlsVersion=None)),
    Row("azure-data-account-shared-key-without-reason", ("azure",), STORAGE,
        azure_tags_without_reason("-data-account", allowSharedKeyAccess=True)),
    Row("azure-data-account-shared-key-unset-without-reason", ("azure",), STORAGE,
        azure_tags_without_reason("-data-account", allowSharedKeyAccess=None)),
    Row("azure-data-account-shared-key-with-an-unknown-reason", ("azure",), STORAGE,
        azure_tags_without_reason("-data-account", "convenience", allowSharedKeyAccess=True)),
    Row("azure-function-account-reason-dropped", ("azure",), STORAGE, azure_tags_without_reason("-fn-storage")),
    Row("x-lifecycle-deletes-everything-after-a-day", ALL, LIFECYCLE, lambda cloud: delete_everything(cloud, 1),
        per_cloud=True),
    Row("x-lifecycle-deletes-everything-at-once", ALL, LIFECYCLE, lambda cloud: delete_everything(cloud, 0),
        per_cloud=True),
    Row("gcp-lifecycle-deletes-every-live-object-after-a-day", ("gcp",), LIFECYCLE, lambda plan: plan.set(
        plan.one("gcp:storage/bucket:Bucket", "-data-bucket"), lifecycleRules=[
            {"action": {"type": "Delete"}, "condition": {"age": 1, "withState": "LIVE"}}])),
)


def _cases() -> list[Any]:
    return [pytest.param(row, cloud, stack, id=f"{row.id}-{stack}") for row in TABLE for cloud, stack in CASES
            if rows_of(cloud) in row.clouds]


# ---------------------------------------------------------------- the runs

@pytest.fixture(scope="module")
def planned():
    """stack -> (its plan, the guardrails' findings on it as planned): shipped.planned, once for the whole run."""
    return shipped.planned


def _judged(rule_id: str, resources: list[PlannedResource]) -> list[guardrails.Finding]:
    rule = next(r for r in guardrails.RULES if r.id == rule_id)
    return list(guardrails.check_rule(rule, guardrails.Context(tuple(resources), {})))


@pytest.mark.parametrize("cloud,stack", CASES)
def test_shipped_stack_is_hardened(planned, cloud, stack):
    _, found = planned(stack)
    assert [f for f in found if f.rule in HOOKS] == []


@pytest.mark.parametrize("row,cloud,stack", _cases())
def test_weakened_resource_is_caught(planned, row, cloud, stack):
    plan, _ = planned(stack)
    copy_ = Plan(stack, plan.resources)
    before = {r.urn: r.props for r in copy_.resources}
    (row.mutate(rows_of(cloud)) if row.per_cloud else row.mutate)(copy_)
    changed = {r.urn for r in copy_.resources if before.get(r.urn) != r.props}
    after = _judged(row.rule, copy_.resources)
    assert after, f"{row.id} on {stack}: {row.rule} did not fire"
    assert all(f.severity is Severity.ERROR for f in after)
    assert {f.urn for f in after} & changed, (changed, after)


def test_a_day_scoped_to_a_prefix_is_not_everything(planned):
    """A short rule on scratch objects (a prefix) leaves the datasets and checkpoints alone: not a finding."""
    stack = next(s for c, s in CASES if c == "gcp")
    plan, _ = planned(stack)
    copy_ = Plan(stack, plan.resources)
    bucket = copy_.one("gcp:storage/bucket:Bucket", "-data-bucket")
    copy_.set(bucket, lifecycleRules=[{"action": {"type": "Delete"},
                                       "condition": {"age": 1, "matchesPrefixes": ["tmp/"]}}])
    assert _judged(LIFECYCLE, copy_.resources) == []


def test_a_size_without_trusted_launch_is_not_asked_for_it(planned):
    """NDasrA100_v4 has no Trusted Launch yet (learn.microsoft.com trusted-launch, 'currently not supported'): a
    scale set of that size without a security profile is no finding."""
    stack = next(s for c, s in CASES if c == "azure")
    plan = Plan(stack, planned(stack)[0].resources)
    azure_security("scale set")(plan)
    node = _azure_host(plan, "scale set")
    plan.set(node, sku={**node.props["sku"], "name": "Standard_ND96asr_v4"})
    assert _judged(HOST, plan.resources) == []


def test_azure_hosts_take_trusted_launch_and_name_why_secure_boot_is_off(planned):
    for cloud, stack in CASES:
        if cloud != "azure":
            continue
        plan = Plan(stack, planned(stack)[0].resources)
        for kind in ("scale set", "head"):
            host = _azure_host(plan, kind)
            profile = host.props["virtualMachineProfile"] if kind == "scale set" else host.props
            assert profile["securityProfile"] == {"securityType": "TrustedLaunch",
                                                  "uefiSettings": {"secureBootEnabled": False, "vTpmEnabled": True}}
            assert host.props["tags"][EXCEPTION_KEY] == "unsigned-kernel-modules"


def test_gpu_hosts_name_why_secure_boot_is_off(planned):
    """The stack says why, as a reason the table knows, with its source: never silence."""
    for cloud, stack in CASES:
        if cloud != "gcp":
            continue
        plan = Plan(stack, planned(stack)[0].resources)
        for node in plan.nodes(GCP_INSTANCE):
            assert node.props["shieldedInstanceConfig"]["enableSecureBoot"] is False
            assert node.props["labels"][EXCEPTION_KEY] == "unsigned-gpu-driver"
        head = next(r for r in plan.of(GCP_INSTANCE) if _in_head(r))
        assert head.props["shieldedInstanceConfig"] == {"enableSecureBoot": True, "enableVtpm": True,
                                                        "enableIntegrityMonitoring": True}
        assert EXCEPTION_KEY not in head.props["labels"]


def test_shared_key_only_where_a_reason_needs_it(planned):
    for cloud, stack in CASES:
        if cloud != "azure":
            continue
        plan = Plan(stack, planned(stack)[0].resources)
        data = plan.one(AZURE_ACCOUNT, "-data-account")
        if _plans_lustre(plan):
            assert data.props["allowSharedKeyAccess"] is True
            assert data.props["tags"][EXCEPTION_KEY] == "amlfs-shared-key"
        else:
            assert data.props["allowSharedKeyAccess"] is False
            assert EXCEPTION_KEY not in data.props["tags"]
        function = plan.one(AZURE_ACCOUNT, "-fn-storage")
        assert function.props["tags"][EXCEPTION_KEY] == "function-deployment-key"


@pytest.mark.parametrize("reasons", [gcp_hardening.REASONS, azure_hardening.REASONS], ids=["gcp", "azure"])
def test_every_reason_has_a_source(reasons):
    for name, reason in reasons.items():
        assert reason.name == name and reason.source.startswith("https://") and reason.settings and reason.why


@pytest.mark.parametrize("rule", sorted(HOOKS))
@pytest.mark.parametrize("cloud", sorted({c for c, _ in CASES}))
def test_each_cloud_judges_each_rule_or_says_why_not(cloud, rule):
    """Where a rule has nothing to judge on a cloud, the cloud's folder says so: no cloud is left silent."""
    facts = cloudfolder.module(cloud, "guardrail_facts").FACTS
    judges = getattr(facts, HOOKS[rule]) is not getattr(guardrails.ProviderFacts("x"), HOOKS[rule])
    said = [why for key, why in facts.not_judged.items() if key.split(" ")[0] == rule]
    assert judges or said, f"{cloud} neither judges {rule} nor says why it has nothing to judge"
    assert not (judges and said and rule != HOST), f"{cloud} both judges {rule} and says it cannot"
    for key in facts.not_judged:
        assert key.split(" ")[0] in {r.id for r in guardrails.RULES}, key


@pytest.mark.parametrize("cloud", sorted({c for c, _ in CASES}))
def test_every_cloud_runs_the_cross_cloud_rows(cloud):
    if rows_of(cloud) is None:
        pytest.fail(f"add {cloudfolder.provider(cloud)} (the provider {cloud} builds on) to ROWS_OF in "
                    "tests/unit/test_contract_hardening.py, with its rows in TABLE: how a host, a store or a "
                    "lifecycle rule of its resources is weakened", pytrace=False)
    assert set(ROWS_OF.values()) == set(ALL)
    for row in TABLE:
        if row.id.startswith("x-"):
            assert row.clouds == ALL


@pytest.mark.parametrize("size,supported", [
    ("Standard_ND96isr_H100_v5", True), ("Standard_NC24ads_A100_v4", True), ("Standard_NC4as_T4_v3", True),
    ("Standard_D2s_v5", True), ("Standard_ND96asr_v4", False), ("Standard_ND96amsr_A100_v4", False),
    ("Standard_NC6", False), ("Standard_D4s_v3", False), ("Standard_Z9_future", True)])
def test_trusted_launch_sizes_as_microsoft_lists_them(size, supported):
    """Anchors read off learn.microsoft.com trusted-launch's size table (ND H100 v5 and NC A100 v4 are in the
    supported ND and NC families; NDasrA100_v4 and NDm_A100_v4 are not yet), and a size no row knows fails closed."""
    assert azure_hardening.supports_trusted_launch(size) is supported
