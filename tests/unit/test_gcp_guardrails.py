"""Google Cloud's guardrail facts and deploy-readiness rules: each catches the bad form and passes the good one, on
resources built by hand in engine (camelCase) form as `goldenenv plan` records them. Google's limits are anchored
by a few literals from its documentation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from goldenenv import guardrails
from goldenenv.clouds.gcp import guardrail_facts, readiness
from goldenenv.guardrails import Finding, PlannedResource, Severity, evaluate, is_taggable

REPO = Path(__file__).resolve().parents[2]
TAGS = {"goldenenv:stack": "demo", "project": "llm", "cost-center": "R-1"}
LABELS = {"goldenenv_stack": "demo", "project": "llm", "cost-center": "r-1"}
"""TAGS as Google Cloud labels (labels.labels), written out: the test does not compute its expectation."""

FIREWALL = "gcp:compute/firewall:Firewall"
INSTANCE = "gcp:compute/instance:Instance"
NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
BUCKET = "gcp:storage/bucket:Bucket"
IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"
IAM_POLICY = "gcp:storage/bucketIAMPolicy:BucketIAMPolicy"
BUCKET_ACL = "gcp:storage/bucketACL:BucketACL"
ACCESS_CONTROL = "gcp:storage/bucketAccessControl:BucketAccessControl"
BUDGET = "gcp:billing/budget:Budget"
TOPIC = "gcp:pubsub/topic:Topic"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
LUSTRE = "gcp:lustre/instance:Instance"
DISK = "gcp:compute/disk:Disk"
PROJECT_METADATA_ITEM = "gcp:compute/projectMetadataItem:ProjectMetadataItem"

ZONE = "us-central1-a"
PROFILE = f"https://www.googleapis.com/compute/beta/projects/p/global/networkProfiles/{ZONE}-vpc-roce"


@pytest.fixture(autouse=True)
def gcp_facts(monkeypatch):
    """Google Cloud's facts in every rule, as found in goldenenv/clouds/gcp/ (registered in case discovery lags)."""
    guardrails.provider_facts()
    monkeypatch.setitem(guardrails.PROVIDERS, "gcp", guardrail_facts.FACTS)


def res(type_: str, name: str, props: dict | None = None, **kwargs) -> PlannedResource:
    """A resource as `goldenenv plan` records it under mocks (id = f"{name}-id"; options it did not set are False)."""
    kwargs.setdefault("retain_on_delete", False)
    return PlannedResource(urn=f"urn:pulumi:demo::goldenenv::{type_}::{name}", type=type_, name=name,
                           props=props or {}, id=f"{name}-id", **kwargs)


def found(resources: list[PlannedResource], rule: str, **kwargs) -> list[Finding]:
    return [f for f in evaluate(resources, TAGS, **kwargs) if f.rule == rule]


def node(name: str = "gpu-0", **props) -> PlannedResource:
    """A private, labelled GPU node as nodes.py plans it; props override."""
    base = {"machineType": "a3-megagpu-8g", "zone": ZONE, "labels": dict(LABELS), "tags": ["demo-nodes"],
            "networkInterfaces": [{"subnetwork": "system-id", "nicType": "GVNIC"}],
            "scheduling": {"onHostMaintenance": "TERMINATE", "provisioningModel": "STANDARD"},
            "metadata": {"serial-port-enable": "FALSE", "enable-oslogin": "TRUE"}}
    return res(INSTANCE, name, {**base, **props})


def firewall(name: str = "ssh", **props) -> PlannedResource:
    base = {"network": "system-id", "direction": "INGRESS", "sourceRanges": ["203.0.113.0/24"],
            "allows": [{"protocol": "tcp", "ports": ["22"]}]}
    return res(FIREWALL, name, {**base, **props})


def bucket(**props) -> PlannedResource:
    base = {"location": "us-central1", "labels": dict(LABELS), "publicAccessPrevention": "enforced",
            "uniformBucketLevelAccess": True}
    return res(BUCKET, "data", {**base, **props}, retain_on_delete=True)


def budget(**props) -> PlannedResource:
    return res(BUDGET, "budget", {"billingAccount": "000000-000000-000000", "amount": {
        "specifiedAmount": {"currencyCode": "USD", "units": "5000"}},
        "budgetFilter": {"labels": {"goldenenv_stack": "demo"}},
        "thresholdRules": [{"thresholdPercent": 1.0, "spendBasis": "CURRENT_SPEND"}], **props})


IDENTITY_AND_HARDENING = frozenset({"grant-broader-than-needed", "host-not-hardened", "storage-not-hardened"})


def test_a_compliant_gcp_cluster_has_no_findings():
    resources = [
        firewall(), firewall("internal", sourceRanges=None, sourceTags=["demo-nodes"], allows=[{"protocol": "all"}]),
        node(), node("head", machineType="n2-standard-8", scheduling={}),
        bucket(), res(IAM_MEMBER, "data-nodes", {"bucket": "data", "role": "roles/storage.objectAdmin",
                                                 "member": "serviceAccount:nodes@p.iam.gserviceaccount.com"}),
        res(DISK, "scratch", {"zone": ZONE, "labels": dict(LABELS)}),
        res(TOPIC, "alerts", {"labels": dict(LABELS)}), budget(),
    ]
    # identities and host hardening are judged on the shipped stacks' real plans, whose components create the
    # service accounts these hand-built resources only name (test_contract_least_privilege, test_contract_hardening)
    assert [f for f in evaluate(resources, TAGS) if f.rule not in IDENTITY_AND_HARDENING] == []


# ---------------------------------------------------------------- untagged-resource: labels, not network tags

def test_gcp_resources_carry_their_tags_as_labels():
    assert guardrails.tag_input(INSTANCE) == "labels"
    assert guardrails.tag_input("aws:ec2/instance:Instance") == "tags"
    assert is_taggable(INSTANCE) and is_taggable(BUCKET) and is_taggable(TOPIC) and is_taggable(LUSTRE)
    # no labels in pulumi-gcp 10.2.0: firewalls, networks, IAM members
    assert not is_taggable(FIREWALL) and not is_taggable(NETWORK) and not is_taggable(IAM_MEMBER)


def test_a_missing_label_names_the_label_form_of_the_tag():
    vm = node(labels={"project": "llm", "cost-center": "r-1"})
    [finding] = found([vm], "untagged-resource")
    assert finding.urn == vm.urn and finding.severity is Severity.ERROR
    assert "goldenenv_stack" in finding.message and "labels" in finding.message
    assert "goldenenv:stack" not in finding.message and "project" not in finding.message


def test_a_label_with_the_tags_raw_value_is_caught():
    vm = node(labels={**LABELS, "cost-center": "R-1"})  # GCP label values are lowercase: labels.labels lowers it
    [finding] = found([vm], "untagged-resource")
    assert "cost-center=r-1" in finding.message


def test_an_instance_is_judged_by_its_labels_not_its_network_tags():
    labelled = node(tags=["demo-nodes", "ssh"])
    assert found([labelled], "untagged-resource") == []
    tags_as_a_map = node(labels=None, tags=dict(LABELS))
    assert [f.urn for f in found([tags_as_a_map], "untagged-resource")] == [tags_as_a_map.urn]


def test_monitoring_resources_are_judged_by_their_user_labels():
    channel = "gcp:monitoring/notificationChannel:NotificationChannel"
    assert guardrails.tag_input(channel) == "userLabels"
    configured = res(channel, "email", {"type": "email", "labels": {"email_address": "ml@example.com"},
                                        "userLabels": dict(LABELS)})
    assert found([configured], "untagged-resource") == []
    unlabelled = res(channel, "email", {"type": "email", "labels": {"email_address": "ml@example.com"}})
    [finding] = found([unlabelled], "untagged-resource")
    assert "goldenenv_stack" in finding.message and "userLabels" in finding.message


def test_provider_default_labels_count():
    vm = node(labels={"project": "llm"}, pulumiLabels=dict(LABELS))
    assert found([vm], "untagged-resource") == []


# ---------------------------------------------------------------- ssh-open-to-world, ingress-open-to-world

@pytest.mark.parametrize("allows,sources", [
    ([{"protocol": "tcp", "ports": ["22"]}], ["0.0.0.0/0"]),
    ([{"protocol": "tcp", "ports": ["1000-2000", "20-30"]}], ["::/0"]),
    ([{"protocol": "tcp"}], ["0.0.0.0/0"]),                    # no ports: every port
    ([{"protocol": "all"}], ["0.0.0.0/0"]),
    ([{"protocol": "6", "ports": ["22"]}], ["0/0"]),           # IANA number, short form
    ([{"protocol": "tcp", "ports": ["22"]}], ["11.0.0.0/8", "13.0.0.0/8"]),
])
def test_a_firewall_opening_ssh_to_the_world_is_caught(allows, sources):
    rule = firewall(allows=allows, sourceRanges=sources)
    [finding] = found([rule], "ssh-open-to-world")
    assert finding.urn == rule.urn and finding.severity is Severity.ERROR and "Firewall 'ssh'" in finding.message


@pytest.mark.parametrize("props", [
    {},                                                                        # an admin /24
    {"direction": "EGRESS", "sourceRanges": None, "destinationRanges": ["0.0.0.0/0"]},
    {"disabled": True, "sourceRanges": ["0.0.0.0/0"]},
    {"sourceRanges": None, "sourceTags": ["demo-nodes"]},                      # other nodes, not addresses
    {"sourceRanges": ["0.0.0.0/0"], "allows": [{"protocol": "tcp", "ports": ["443"]}]},
    {"sourceRanges": ["0.0.0.0/0"], "allows": [{"protocol": "udp", "ports": ["22"]}]},
])
def test_a_firewall_closed_to_the_world_on_ssh_passes(props):
    assert found([firewall(**props)], "ssh-open-to-world") == []


def test_other_ports_open_to_the_world_are_a_warning():
    rule = firewall(sourceRanges=["0.0.0.0/0"], allows=[{"protocol": "tcp", "ports": ["8888"]}])
    [finding] = found([rule], "ingress-open-to-world")
    assert finding.severity is Severity.WARNING and "tcp 8888-8888 from 0.0.0.0/0" in finding.message


def test_firewalls_narrow_alone_but_wide_together_are_caught_once():
    first = firewall("admin-a", sourceRanges=["11.0.0.0/8"])
    second = firewall("admin-b", sourceRanges=["13.0.0.0/8"])
    [finding] = found([first, second], "ssh-open-to-world")
    assert finding.urn == first.urn and "together" in finding.message


# ---------------------------------------------------------------- public-ip-on-gpu-node, public-ip-on-head

def test_an_access_config_gives_a_node_a_public_ip():
    vm = node(networkInterfaces=[{"subnetwork": "system-id", "accessConfigs": [{"networkTier": "PREMIUM"}]}])
    [finding] = found([vm], "public-ip-on-gpu-node")
    assert finding.urn == vm.urn and "external IP" in finding.message and "accessConfigs" in finding.message


def test_a_static_external_address_on_a_node_is_named():
    address = res("gcp:compute/address:Address", "gpu-ip", {"addressType": "EXTERNAL", "region": "us-central1"},
                  outputs={"address": "34.1.2.3"})
    vm = node(networkInterfaces=[{"subnetwork": "system-id", "accessConfigs": [{"natIp": "34.1.2.3"}]}])
    [finding] = found([address, vm], "public-ip-on-gpu-node")
    assert "Address 'gpu-ip'" in finding.message


def test_an_ipv6_access_config_is_caught():
    vm = node(networkInterfaces=[{"subnetwork": "system-id", "ipv6AccessConfigs": [{"networkTier": "PREMIUM"}]}])
    [finding] = found([vm], "public-ip-on-gpu-node")
    assert "IPv6" in finding.message


@pytest.mark.parametrize("resource", [
    node(metadata={"serial-port-enable": "TRUE"}),
    node(metadata={"serial-port-enable": "1"}),
    res(PROJECT_METADATA_ITEM, "serial", {"key": "serial-port-enable", "value": "true"}),
])
def test_a_serial_console_open_to_ssh_is_caught(resource):
    [finding] = found([resource], "public-ip-on-gpu-node")
    assert "serial-port-enable" in finding.message


def test_private_nodes_pass():
    assert found([node(), node(metadata={"serial-port-enable": "FALSE"})], "public-ip-on-gpu-node") == []


def _head(props: dict) -> PlannedResource:
    urn = f"urn:pulumi:demo::goldenenv::goldenenv:gcp:GpuCluster$goldenenv:gcp:SlurmHead${INSTANCE}::demo-head"
    return PlannedResource(urn=urn, type=INSTANCE, name="demo-head", props=props, id="demo-head-id")


def test_a_head_with_an_access_config_is_caught_and_a_private_one_passes():
    public = _head({"networkInterfaces": [{"subnetwork": "s", "accessConfigs": [{}]}], "labels": dict(LABELS)})
    [finding] = found([public], "public-ip-on-head")
    assert "Slurm head" in finding.message and "accessConfigs" in finding.message
    private = _head({"networkInterfaces": [{"subnetwork": "s"}], "labels": dict(LABELS)})
    assert found([private], "public-ip-on-head") == []


# ---------------------------------------------------------------- s3-public-access: Cloud Storage

@pytest.mark.parametrize("prevention", [None, "inherited"])
def test_a_bucket_without_public_access_prevention_enforced_is_caught(prevention):
    data = bucket(publicAccessPrevention=prevention)
    [finding] = found([data], "s3-public-access")
    assert finding.urn == data.urn and "publicAccessPrevention" in finding.message and "enforced" in finding.message


@pytest.mark.parametrize("grant", [
    res(IAM_MEMBER, "public", {"bucket": "data", "role": "roles/storage.objectViewer", "member": "allUsers"}),
    res(IAM_BINDING, "public", {"bucket": "data", "role": "roles/storage.objectViewer",
                                "members": ["group:ml@example.com", "allAuthenticatedUsers"]}),
    res(IAM_POLICY, "public", {"bucket": "data", "policyData": json.dumps({"bindings": [
        {"role": "roles/storage.objectViewer", "members": ["allUsers"]}]})}),
    res(BUCKET_ACL, "public", {"bucket": "data", "roleEntities": ["OWNER:project-owners-1", "READER:allUsers"]}),
    res(BUCKET_ACL, "public", {"bucket": "data", "predefinedAcl": "publicRead"}),
    res(ACCESS_CONTROL, "public", {"bucket": "data", "role": "READER", "entity": "allAuthenticatedUsers"}),
], ids=["iam-member", "iam-binding", "iam-policy", "acl-entities", "predefined-acl", "access-control"])
def test_a_grant_to_everyone_is_caught(grant):
    [finding] = found([bucket(), grant], "s3-public-access")
    assert finding.urn == grant.urn and finding.severity is Severity.ERROR


def test_grants_to_named_principals_pass():
    grants = [res(IAM_MEMBER, "nodes", {"bucket": "data", "role": "roles/storage.objectAdmin",
                                        "member": "serviceAccount:nodes@p.iam.gserviceaccount.com"}),
              res(BUCKET_ACL, "private", {"bucket": "data", "predefinedAcl": "private"})]
    assert found([bucket(), *grants], "s3-public-access") == []


# ---------------------------------------------------------------- data stores, encryption, metadata

def test_a_bucket_is_a_data_store_and_lustre_is_the_working_copy():
    dropped = bucket()
    dropped = PlannedResource(**{**dropped.__dict__, "retain_on_delete": False})
    assert [f.urn for f in found([dropped], "data-store-not-retained")] == [dropped.urn]
    assert found([bucket(forceDestroy=True)], "data-store-not-retained")
    assert found([bucket()], "data-store-not-retained") == []
    lustre = res(LUSTRE, "fs", {"location": ZONE, "labels": dict(LABELS)})  # exported to the bucket before destroy
    assert found([lustre], "data-store-not-retained") == []


def test_a_bucket_is_exempt_from_retention_by_its_flag_not_by_being_a_functions_source():
    source = res(BUCKET, "stop-source", {"name": "p-goldenenv-stopfn", "forceDestroy": True,
                                         "publicAccessPrevention": "enforced", "labels": dict(LABELS)})
    assert len(found([source], "data-store-not-retained")) == 2  # not retained, forceDestroy
    stop = res(FUNCTION, "stop", {"labels": dict(LABELS), "buildConfig": {"source": {"storageSource": {
        "bucket": "p-goldenenv-stopfn", "object": "stopfn.zip"}}}})
    assert len(found([source, stop], "data-store-not-retained")) == 2  # being named exempts nothing
    flagged = res(BUCKET, "stop-source", {**source.props, "labels": {**LABELS, "goldenenv-holds": "function-code"}})
    assert found([flagged, stop], "data-store-not-retained") == []
    unknown = res(BUCKET, "stop-source", {**source.props, "labels": {**LABELS, "goldenenv-holds": "whatever"}})
    assert len(found([unknown], "data-store-not-retained")) == 2  # only a known kind of content exempts


def test_google_encrypts_at_rest_and_has_no_tokenless_metadata_server():
    """Nothing to flag: disks, buckets and topics are encrypted by default; the metadata server needs its header."""
    resources = [res(DISK, "scratch", {"labels": dict(LABELS)}), bucket(), res(TOPIC, "alerts",
                                                                              {"labels": dict(LABELS)}),
                 node(metadata={"enable-oslogin": "FALSE"})]
    for rule in ("unencrypted-storage", "unencrypted-topic", "imdsv1-allowed"):
        assert found(resources, rule) == [], rule


# ---------------------------------------------------------------- budget-not-planned

def test_a_plan_with_nodes_but_no_budget_is_caught():
    [finding] = found([node(), node("gpu-1")], "budget-not-planned")
    assert finding.urn == node().urn and "2 gcp instance(s)" in finding.message
    assert "Cloud Billing budget" in finding.message
    assert found([node()], "budget-not-planned", budget_opt_out=True) == []
    assert found([node(), budget()], "budget-not-planned") == []


def test_a_hard_stop_needs_the_budgets_topic_to_trigger_a_function():
    topic_id = "projects/p/topics/demo-budget"
    routed = budget(allUpdatesRule={"pubsubTopic": topic_id, "schemaVersion": "1.0"})
    [unrouted] = found([node(), budget()], "budget-not-planned", hard_stop=True)
    assert "hard stop" in unrouted.message
    [no_function] = found([node(), routed], "budget-not-planned", hard_stop=True)
    assert topic_id in no_function.message and "function" in no_function.message
    stop = res(FUNCTION, "stop", {"location": "us-central1", "labels": dict(LABELS), "eventTrigger": {
        "eventType": "google.cloud.pubsub.topic.v1.messagePublished", "pubsubTopic": topic_id}})
    assert found([node(), routed, stop], "budget-not-planned", hard_stop=True) == []


# ---------------------------------------------------------------- readiness (plan --strict)

def strict(resources: list[PlannedResource], rule: str) -> list[str]:
    return [f.message for f in readiness.findings(resources, TAGS) if f.rule == rule]


def test_googles_limits_as_documented():
    assert readiness.COMPACT_PLACEMENT_MAX_VMS == 1500
    assert readiness.GPU_QUOTAS["a3-megagpu"] == "NVIDIA_H100_MEGA_GPUS"
    assert readiness.GPU_QUOTAS["a3-ultragpu"] == "NVIDIA_H200_GPUS"
    assert readiness.GPU_QUOTAS["a4-highgpu"] == "NVIDIA_B200_GPUS"
    assert readiness.SPOT_QUOTA_PREFIX == "PREEMPTIBLE_"


@pytest.mark.parametrize("scheduling", [{}, {"onHostMaintenance": "MIGRATE"}])
def test_a_gpu_node_that_would_live_migrate_is_refused(scheduling):
    [message] = strict([node(scheduling=scheduling)], "strict:gcp-host-maintenance")
    assert "TERMINATE" in message


def test_attached_gpus_need_terminate_too_and_cpu_nodes_do_not():
    attached = node(machineType="n1-standard-8", guestAccelerators=[{"type": "nvidia-tesla-t4", "count": 1}],
                    scheduling={})
    assert strict([attached], "strict:gcp-host-maintenance")
    assert strict([node(), node("head", machineType="n2-standard-8", scheduling={})],
                  "strict:gcp-host-maintenance") == []


def _nics(count: int) -> list[dict]:
    return [{"subnetwork": f"net-{i}-id", "nicType": "GVNIC"} for i in range(count)]


@pytest.mark.parametrize("machine,most", [("a3-megagpu-8g", 9), ("a3-ultragpu-8g", 10), ("a4-highgpu-8g", 10)])
def test_more_nics_than_the_machine_has_are_refused(machine, most):
    [message] = strict([node(machineType=machine, networkInterfaces=_nics(most + 1))], "strict:gcp-nic-count")
    assert f"declares {most + 1} network interfaces" in message and f"takes {most}" in message
    assert strict([node(machineType=machine, networkInterfaces=_nics(most))], "strict:gcp-nic-count") == []


def _roce_plan(zone: str = ZONE, subnet_region: str = "us-central1", nic_type: str = "MRDMA",
               profile: str | None = PROFILE) -> list[PlannedResource]:
    roce = res(NETWORK, "roce", {"name": "demo-roce", "mtu": 8896, **({"networkProfile": profile} if profile else {})})
    sub = res(SUBNETWORK, "roce-0", {"name": "demo-roce-0", "network": "roce-id", "region": subnet_region,
                                     "ipCidrRange": "192.168.128.0/24"})
    vm = node(machineType="a3-ultragpu-8g", zone=zone, networkInterfaces=[
        {"subnetwork": "system-id", "nicType": "GVNIC"}, {"subnetwork": "roce-0-id", "nicType": nic_type}])
    return [roce, sub, vm]


def test_a_roce_layout_in_its_zone_passes():
    plan = _roce_plan()
    for rule in ("strict:gcp-mrdma-network", "strict:gcp-roce-zone"):
        assert strict(plan, rule) == [], rule


def test_an_mrdma_nic_on_a_regular_network_is_refused():
    [message] = strict(_roce_plan(profile=None), "strict:gcp-mrdma-network")
    assert "MRDMA NIC" in message and "vpc-roce" in message


def test_a_gvnic_on_the_roce_network_is_refused():
    [message] = strict(_roce_plan(nic_type="GVNIC"), "strict:gcp-mrdma-network")
    assert "MRDMA NICs only" in message


def test_a_roce_network_used_from_another_zone_is_refused():
    [message] = strict(_roce_plan(zone="us-central1-b"), "strict:gcp-roce-zone")
    assert "us-central1-b" in message and ZONE in message
    [subnet] = strict(_roce_plan(subnet_region="us-east4"), "strict:gcp-roce-zone")
    assert "us-east4" in subnet and "us-central1" in subnet


def _placement(vm_count: int | None, members: int, region: str = "us-central1") -> list[PlannedResource]:
    link = f"https://www.googleapis.com/compute/v1/projects/p/regions/{region}/resourcePolicies/demo-placement"
    policy = res(POLICY, "placement", {"name": "demo-placement", "region": region, "groupPlacementPolicy": {
        "collocation": "COLLOCATED", **({"vmCount": vm_count} if vm_count is not None else {})}},
        outputs={"selfLink": link})
    return [policy, *(node(f"gpu-{i}", resourcePolicies=link) for i in range(members))]


def test_a_compact_policy_matching_its_nodes_passes():
    assert strict(_placement(2, 2), "strict:gcp-compact-placement") == []


def test_a_compact_policy_over_googles_limit_is_refused():
    [message] = strict(_placement(1501, 0), "strict:gcp-compact-placement")
    assert "1501" in message and "1500" in message


def test_a_compact_policy_whose_vm_count_differs_from_its_nodes_is_refused():
    [message] = strict(_placement(2, 3), "strict:gcp-compact-placement")
    assert "vmCount 2" in message and "3 planned" in message


def test_a_compact_policy_in_another_region_is_refused():
    [message] = strict(_placement(2, 2, region="us-east4"), "strict:gcp-compact-placement")
    assert "us-east4" in message


def test_a_reservation_bound_node_names_its_reservation():
    bound = {"onHostMaintenance": "TERMINATE", "provisioningModel": "RESERVATION_BOUND"}
    [message] = strict([node(scheduling=bound)], "strict:gcp-reservation-bound")
    assert "SPECIFIC_RESERVATION" in message
    named = node(scheduling=bound, reservationAffinity={"type": "SPECIFIC_RESERVATION", "specificReservation": {
        "key": "compute.googleapis.com/reservation-name", "values": ["h200-block"]}})
    assert strict([named], "strict:gcp-reservation-bound") == []


def test_lustre_in_another_zone_than_the_nodes_is_a_warning():
    far = res(LUSTRE, "fs", {"location": "us-central1-b", "labels": dict(LABELS)})
    [finding] = [f for f in readiness.findings([far, node()], TAGS) if f.rule == "strict:gcp-lustre-zone"]
    assert finding.severity is Severity.WARNING and "us-central1-b" in finding.message and ZONE in finding.message
    near = res(LUSTRE, "fs", {"location": ZONE})
    assert strict([near, node()], "strict:gcp-lustre-zone") == []


def test_gpu_quota_is_named_per_family_region_and_market():
    spot = {"onHostMaintenance": "TERMINATE", "provisioningModel": "SPOT", "preemptible": True}
    nodes = [node("h200-0", machineType="a3-ultragpu-8g", scheduling=spot),
             node("h200-1", machineType="a3-ultragpu-8g", scheduling=spot),
             node("mega-0")]
    messages = strict(nodes, "strict:gcp-gpu-quota")
    assert len(messages) == 2
    assert "16 GPUs of quota PREEMPTIBLE_NVIDIA_H200_GPUS in us-central1" in messages[0]
    assert "8 GPUs of quota NVIDIA_H100_MEGA_GPUS in us-central1" in messages[1]
    assert all("GPUS_ALL_REGIONS" in m for m in messages)


def test_reservation_bound_nodes_ask_no_quota():
    bound = node(scheduling={"onHostMaintenance": "TERMINATE", "provisioningModel": "RESERVATION_BOUND"})
    assert strict([bound], "strict:gcp-gpu-quota") == []


def test_readiness_rules_have_unique_strict_ids():
    ids = [rule.id for rule in readiness.RULES]
    assert len(ids) == len(set(ids)) and all(i.startswith("strict:gcp-") for i in ids)


# ---------------------------------------------------------------- the shipped stacks (once there are gcp stacks)

GCP_STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (REPO / "stacks").glob("Pulumi.*.yaml")
                    if (yaml.safe_load(p.read_text()) or {}).get("config", {}).get("goldenenv:cloud") == "gcp")


@pytest.mark.parametrize("stack", GCP_STACKS)
def test_the_shipped_gcp_stacks_pass_every_guardrail_and_readiness_rule(stack):
    from goldenenv.plan import plan

    result = plan(stack, strict=True)
    errors = [f for f in result.findings if f.severity is Severity.ERROR]
    assert errors == [], [f.message for f in errors]
