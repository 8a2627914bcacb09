"""Guardrails: each rule catches the bad form and passes the good one, on resources in engine (camelCase) form."""

from __future__ import annotations

import inspect
import json
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from goldenenv import guardrails
from goldenenv.guardrails import Finding, PlannedResource, Severity, evaluate, is_taggable

REPO = Path(__file__).resolve().parents[2]
TAGS = {"project": "llm-pretrain", "owner": "ml-team"}

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
SG = "aws:ec2/securityGroup:SecurityGroup"
BUCKET = "aws:s3/bucket:Bucket"
SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"


def res(type_: str, name: str, props: dict | None = None, **kwargs) -> PlannedResource:
    """A resource as `goldenenv plan` records it under mocks (id = f"{name}-id"; options it did not set are False)."""
    urn = f"urn:pulumi:test::goldenenv::{type_}::{name}"
    kwargs.setdefault("retain_on_delete", False)
    return PlannedResource(urn=urn, type=type_, name=name, props=props or {}, id=f"{name}-id", **kwargs)


def findings(resources: list[PlannedResource], rule: str, required_tags=TAGS) -> list[Finding]:
    return [f for f in evaluate(resources, required_tags) if f.rule == rule]


def good_launch_template(name: str = "gpu-nodes", **overrides) -> PlannedResource:
    props = {
        "tags": dict(TAGS),
        "tagSpecifications": [{"resourceType": kind, "tags": dict(TAGS)}
                              for kind in ("instance", "volume", "network-interface")],
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true", "volumeSize": 500.0}}],
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2.0},
        "networkInterfaces": [{"deviceIndex": 0.0, "interfaceType": "efa", "subnetId": "private-id",
                               "associatePublicIpAddress": "false"}],
    }
    props.update(overrides)
    return res(LT, name, props)


def test_a_compliant_cluster_has_no_findings():
    resources = [
        good_launch_template(),
        res(SUBNET, "private", {"mapPublicIpOnLaunch": False, "tags": dict(TAGS)}),
        res(SG, "nodes", {"tags": dict(TAGS), "ingress": [
            {"protocol": "-1", "fromPort": 0.0, "toPort": 0.0, "self": True},
            {"protocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrBlocks": ["203.0.113.0/24"]}]}),
        res(BUCKET, "checkpoints", {"tags": dict(TAGS)}, retain_on_delete=True),
        res(SSE, "checkpoints-sse", {"bucket": "checkpoints-id"}),
        res("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "checkpoints-private",
            {"bucket": "checkpoints-id", "blockPublicAcls": True, "blockPublicPolicy": True,
             "ignorePublicAcls": True, "restrictPublicBuckets": True}),
        res("aws:ec2/route:Route", "default-route", {"destinationCidrBlock": "0.0.0.0/0"}),
    ]
    assert evaluate(resources, TAGS) == []


# ---------------------------------------------------------------- is_taggable reads the SDK

def test_is_taggable_reads_the_provider_sdk():
    assert is_taggable("aws:ec2/vpc:Vpc")
    assert is_taggable("aws:ec2/placementGroup:PlacementGroup")
    assert is_taggable("aws:ec2/launchTemplate:LaunchTemplate")
    assert is_taggable("alicloud:ecs/instance:Instance")
    # pulumi-aws 7.51.1 declares no tags on these: they are attachments to a tagged parent.
    assert not is_taggable("aws:ec2/securityGroupRule:SecurityGroupRule")
    assert not is_taggable("aws:s3/bucketVersioning:BucketVersioning")


def test_is_taggable_agrees_with_the_sdk_signatures():
    import pulumi_aws

    assert "tags" in inspect.signature(pulumi_aws.ec2.PlacementGroup._internal_init).parameters
    assert "tags" not in inspect.signature(pulumi_aws.s3.BucketVersioning._internal_init).parameters


@pytest.mark.parametrize("token", [
    "aws:ec2/noSuchThing:NoSuchThing",        # unknown class
    "nosuchcloud:compute/vm:Vm",              # unknown package
    "aws:nosuchmodule/vpc:Vpc",               # unknown module
    "pulumi:providers:aws",                   # provider resource
    "goldenenv:aws:GpuCluster",               # component resource
    "not a token",
])
def test_is_taggable_is_false_for_what_the_sdk_does_not_tag(token):
    assert not is_taggable(token)


# ---------------------------------------------------------------- untagged-resource

def test_untagged_resource_names_the_missing_keys():
    vpc = res("aws:ec2/vpc:Vpc", "cluster-vpc", {"cidrBlock": "10.0.0.0/16", "tags": {"project": "llm-pretrain"}})
    [finding] = findings([vpc], "untagged-resource")
    assert finding.severity is Severity.ERROR
    assert finding.urn == vpc.urn
    assert "cluster-vpc" in finding.message and "owner" in finding.message and "project" not in finding.message


def test_untagged_resource_catches_a_wrong_value():
    vpc = res("aws:ec2/vpc:Vpc", "cluster-vpc", {"tags": {**TAGS, "owner": "someone-else"}})
    [finding] = findings([vpc], "untagged-resource")
    assert "owner=ml-team" in finding.message


def test_untagged_resource_passes_tagged_and_untaggable_resources():
    resources = [
        res("aws:ec2/vpc:Vpc", "cluster-vpc", {"tags": {**TAGS, "Name": "cluster-vpc"}}),
        res("aws:ec2/securityGroupRule:SecurityGroupRule", "ssh", {"type": "ingress"}),
        res("goldenenv:aws:GpuCluster", "cluster", {}, custom=False),
        res("pulumi:providers:aws", "default", {"region": "us-east-1"}),
    ]
    assert findings(resources, "untagged-resource") == []


def test_untagged_resource_requires_launch_template_tag_specifications():
    specs = [{"resourceType": "instance", "tags": dict(TAGS)}, {"resourceType": "volume", "tags": {"owner": "ml-team"}}]
    template = good_launch_template(tagSpecifications=specs)
    messages = [f.message for f in findings([template], "untagged-resource")]
    assert len(messages) == 2
    assert any("network-interface" in m and "gpu-nodes" in m for m in messages)
    assert any("'volume'" in m and "project" in m for m in messages)


def test_without_required_tags_any_tags_are_enough():
    assert findings([res("aws:ec2/vpc:Vpc", "bare", {})], "untagged-resource", required_tags={})
    assert not findings([res("aws:ec2/vpc:Vpc", "tagged", {"tags": {"a": "b"}})], "untagged-resource",
                        required_tags={})


# ---------------------------------------------------------------- ssh-open-to-world / ingress-open-to-world

@pytest.mark.parametrize("resource", [
    res(SG, "nodes", {"ingress": [{"protocol": "tcp", "fromPort": 22.0, "toPort": 22.0,
                                   "cidrBlocks": ["0.0.0.0/0"]}]}),
    res(SG, "nodes", {"ingress": [{"protocol": "-1", "fromPort": 0.0, "toPort": 0.0,
                                   "ipv6CidrBlocks": ["::/0"]}]}),
    res(SG, "nodes", {"ingress": [{"protocol": "tcp", "fromPort": 1.0, "toPort": 1024.0,
                                   "cidrBlocks": ["10.0.0.0/8", "0.0.0.0/0"]}]}),
    res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "nodes",
        {"ipProtocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrIpv4": "0.0.0.0/0"}),
    res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "nodes",
        {"ipProtocol": "-1", "cidrIpv6": "::/0"}),
    res("aws:ec2/securityGroupRule:SecurityGroupRule", "nodes",
        {"type": "ingress", "protocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrBlocks": ["0.0.0.0/0"]}),
    res("alicloud:ecs/securityGroupRule:SecurityGroupRule", "nodes",
        {"type": "ingress", "ipProtocol": "tcp", "portRange": "22/22", "cidrIp": "0.0.0.0/0"}),
], ids=["sg-tcp22", "sg-all-ipv6", "sg-range", "ingress-rule", "ingress-rule-all", "sg-rule", "alicloud"])
def test_ssh_open_to_world_is_caught(resource):
    [finding] = findings([resource], "ssh-open-to-world")
    assert finding.severity is Severity.ERROR and "'nodes'" in finding.message and "SSH" in finding.message


@pytest.mark.parametrize("resource", [
    res(SG, "nodes", {"ingress": [{"protocol": "tcp", "fromPort": 22.0, "toPort": 22.0,
                                   "cidrBlocks": ["203.0.113.7/32"]},
                                  {"protocol": "-1", "fromPort": 0.0, "toPort": 0.0, "self": True}]}),
    res("aws:ec2/securityGroupRule:SecurityGroupRule", "egress",
        {"type": "egress", "protocol": "-1", "fromPort": 0.0, "toPort": 0.0, "cidrBlocks": ["0.0.0.0/0"]}),
    res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "https",
        {"ipProtocol": "tcp", "fromPort": 443.0, "toPort": 443.0, "cidrIpv4": "0.0.0.0/0"}),
    res("alicloud:ecs/securityGroupRule:SecurityGroupRule", "blocked",
        {"type": "ingress", "ipProtocol": "all", "portRange": "-1/-1", "cidrIp": "0.0.0.0/0", "policy": "drop"}),
], ids=["restricted", "egress", "other-port", "alicloud-drop"])
def test_ssh_closed_to_world_passes(resource):
    assert findings([resource], "ssh-open-to-world") == []


SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


def _ssh(cidrs: list[str]) -> dict:
    return {"protocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrBlocks": cidrs}


@pytest.mark.parametrize("ingress", [
    [_ssh(["0.0.0.0/1"]), _ssh(["128.0.0.0/1"])],
    [_ssh(["0.0.0.0/1", "128.0.0.0/1"])],
    [_ssh(["64.0.0.0/3"])],
    [{"protocol": "-1", "fromPort": 0.0, "toPort": 0.0, "cidrBlocks": ["0.0.0.0/1"]}, _ssh(["128.0.0.0/1"])],
    [{"protocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "ipv6CidrBlocks": ["2000::/3"]}],
], ids=["halves-in-two-rules", "halves-in-one-rule", "public-slash3", "all-ports-plus-ssh", "ipv6-global"])
def test_ssh_from_a_union_covering_public_space_is_caught(ingress):
    group = res(SG, "nodes", {"ingress": ingress})
    [finding] = findings([group], "ssh-open-to-world")
    assert finding.urn == group.urn and "'nodes'" in finding.message and "together cover" in finding.message


def test_ssh_halves_split_across_a_group_and_its_standalone_rules_are_caught():
    """The network component writes one rule per admin CIDR: each half alone is 'not the world'."""
    group = res(SG, "nodes", {"ingress": [_ssh(["0.0.0.0/1"])]})
    rule = res(SG_RULE, "admin-2", {"type": "ingress", "securityGroupId": "nodes-id", **_ssh(["128.0.0.0/1"])})
    new = res(INGRESS_RULE, "admin-3", {"securityGroupId": "nodes-id", "ipProtocol": "tcp", "fromPort": 22.0,
                                        "toPort": 22.0, "cidrIpv4": "203.0.113.0/24"})
    [finding] = findings([group, rule, new], "ssh-open-to-world")
    assert finding.urn == group.urn
    assert "0.0.0.0/0" in finding.message and "'admin-2'" in finding.message and "203.0.113.0/24" not in finding.message


def test_ssh_sources_narrow_alone_but_wide_together_are_caught_once():
    """2.0.0.0/8 and 3.0.0.0/8 each pass (a /8); on one group they are the public /7 2.0.0.0/7."""
    rules = [res(INGRESS_RULE, f"admin-{i}", {"securityGroupId": "sg-0123", "ipProtocol": "tcp", "fromPort": 22.0,
                                              "toPort": 22.0, "cidrIpv4": cidr})
             for i, cidr in enumerate(["2.0.0.0/8", "3.0.0.0/8"])]
    other_group = res(INGRESS_RULE, "elsewhere", {"securityGroupId": "sg-9999", "ipProtocol": "tcp",
                                                  "fromPort": 22.0, "toPort": 22.0, "cidrIpv4": "4.0.0.0/8"})
    caught = findings([*rules, other_group], "ssh-open-to-world")
    assert [f.urn for f in caught] == [rules[0].urn]
    assert "2.0.0.0/7" in caught[0].message and "'admin-1'" in caught[0].message
    assert [f.urn for f in findings(rules[:1], "ssh-open-to-world")] == []


def test_ssh_rules_matched_to_their_group_by_dependency():
    group = res(SG, "nodes", {"ingress": [_ssh(["0.0.0.0/1"])]})
    rule = PlannedResource(urn="urn:rule", type=INGRESS_RULE, name="half", props={
        "securityGroupId": None, "ipProtocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrIpv4": "128.0.0.0/1"},
        property_dependencies={"securityGroupId": (group.urn,)})
    assert [f.urn for f in findings([group, rule], "ssh-open-to-world")] == [group.urn]


@pytest.mark.parametrize("ingress", [
    [_ssh(["203.0.113.0/24"]), _ssh(["198.51.100.0/24"]), _ssh(["11.0.0.0/8"])],
    [_ssh(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"])],
    [_ssh(["2001:db8::/32"]), {"protocol": "tcp", "fromPort": 22.0, "toPort": 22.0,
                                "ipv6CidrBlocks": ["2a00:1450::/32"]}],
    [{"protocol": "tcp", "fromPort": 443.0, "toPort": 443.0, "cidrBlocks": ["2.0.0.0/8"]}, _ssh(["3.0.0.0/8"])],
], ids=["offices-and-a-slash8", "private", "ipv6-slash32", "other-port-adjacent"])
def test_ssh_from_narrow_or_private_sources_passes(ingress):
    assert findings([res(SG, "nodes", {"ingress": ingress})], "ssh-open-to-world") == []


def test_other_ports_open_to_world_are_a_warning():
    jupyter = res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "jupyter",
                  {"ipProtocol": "tcp", "fromPort": 8888.0, "toPort": 8888.0, "cidrIpv4": "0.0.0.0/0"})
    [finding] = findings([jupyter], "ingress-open-to-world")
    assert finding.severity is Severity.WARNING and "'jupyter'" in finding.message and "8888" in finding.message
    internal = res(SG, "internal", {"ingress": [{"protocol": "tcp", "fromPort": 8888.0, "toPort": 8888.0,
                                                 "cidrBlocks": ["10.0.0.0/16"]}]})
    assert findings([internal], "ingress-open-to-world") == []


# ---------------------------------------------------------------- unencrypted-storage / unencrypted-topic

@pytest.mark.parametrize("encrypted", [None, "false", False])
def test_unencrypted_launch_template_disk_is_caught(encrypted):
    ebs = {"volumeSize": 500.0} if encrypted is None else {"volumeSize": 500.0, "encrypted": encrypted}
    template = good_launch_template(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": ebs}])
    [finding] = findings([template], "unencrypted-storage")
    assert "gpu-nodes" in finding.message and "/dev/xvda" in finding.message


@pytest.mark.parametrize("encrypted", ["true", True])
def test_encrypted_launch_template_disk_passes(encrypted):
    template = good_launch_template(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"encrypted": encrypted}},
                                                         {"deviceName": "/dev/sdb", "virtualName": "ephemeral0"}])
    assert findings([template], "unencrypted-storage") == []


def test_unencrypted_volume_and_instance_disks_are_caught():
    volume = res("aws:ebs/volume:Volume", "scratch", {"size": 100.0, "availabilityZone": "us-east-1a"})
    instance = res(INSTANCE, "head", {"rootBlockDevice": {"volumeSize": 50.0},
                                      "ebsBlockDevices": [{"deviceName": "/dev/sdf", "encrypted": False}]})
    messages = [f.message for f in findings([volume, instance], "unencrypted-storage")]
    assert len(messages) == 3
    assert any("'scratch'" in m for m in messages)
    assert sum("'head'" in m for m in messages) == 2


def test_encrypted_volume_and_instance_disks_pass():
    volume = res("aws:ebs/volume:Volume", "scratch", {"size": 100.0, "encrypted": True})
    instance = res(INSTANCE, "head", {"rootBlockDevice": {"encrypted": True},
                                      "ebsBlockDevices": [{"deviceName": "/dev/sdf", "encrypted": True}]})
    from_template = res(INSTANCE, "node", {"launchTemplate": {"id": "gpu-nodes-id", "version": "$Latest"}})
    assert findings([volume, instance, from_template], "unencrypted-storage") == []


def test_bucket_without_encryption_configuration_is_caught():
    bucket = res(BUCKET, "checkpoints", {"bucket": "acme-checkpoints"}, retain_on_delete=True)
    other = res(SSE, "datasets-sse", {"bucket": "datasets-id"})
    [finding] = findings([bucket, other], "unencrypted-storage")
    assert "checkpoints" in finding.message and finding.urn == bucket.urn


@pytest.mark.parametrize("sse_bucket", ["checkpoints-id", "acme-checkpoints"], ids=["by-id", "by-name"])
def test_bucket_with_encryption_configuration_passes(sse_bucket):
    bucket = res(BUCKET, "checkpoints", {"bucket": "acme-checkpoints"}, retain_on_delete=True)
    sse = res(SSE, "checkpoints-sse", {"bucket": sse_bucket, "rules": [
        {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]})
    assert findings([bucket, sse], "unencrypted-storage") == []


def test_bucket_encryption_matched_by_dependency_when_the_id_is_unknown():
    bucket = res(BUCKET, "checkpoints", {}, retain_on_delete=True)
    sse = res(SSE, "checkpoints-sse", {"bucket": None}, property_dependencies={"bucket": (bucket.urn,)})
    assert findings([bucket, sse], "unencrypted-storage") == []


def test_unencrypted_topic_is_a_warning():
    [finding] = findings([res("aws:sns/topic:Topic", "budget-alerts", {"name": "budget"})], "unencrypted-topic")
    assert finding.severity is Severity.WARNING and "budget-alerts" in finding.message
    encrypted = res("aws:sns/topic:Topic", "budget-alerts", {"kmsMasterKeyId": "alias/aws/sns"})
    assert findings([encrypted], "unencrypted-topic") == []


# ---------------------------------------------------------------- imdsv1-allowed

@pytest.mark.parametrize("options", [None, {"httpTokens": "optional"}, {"httpEndpoint": "enabled"}])
def test_imdsv1_is_caught(options):
    template = good_launch_template(metadataOptions=options)
    instance = res(INSTANCE, "head", {} if options is None else {"metadataOptions": options})
    caught = findings([template, instance], "imdsv1-allowed")
    assert [f.urn for f in caught] == [template.urn, instance.urn]
    assert "gpu-nodes" in caught[0].message and "head" in caught[1].message


def test_imdsv2_passes_and_templated_instances_are_exempt():
    instance = res(INSTANCE, "head", {"metadataOptions": {"httpTokens": "required"}})
    from_template = res(INSTANCE, "node", {"launchTemplate": {"id": "gpu-nodes-id"}})
    assert findings([good_launch_template(), instance, from_template], "imdsv1-allowed") == []


# ---------------------------------------------------------------- public-ip-on-gpu-node

@pytest.mark.parametrize("value", ["true", True])
def test_public_ip_on_launch_template_interface_is_caught(value):
    template = good_launch_template(networkInterfaces=[{"deviceIndex": 0.0, "associatePublicIpAddress": value}])
    [finding] = findings([template], "public-ip-on-gpu-node")
    assert "gpu-nodes" in finding.message


def test_public_ip_on_instance_is_caught():
    instance = res(INSTANCE, "head", {"associatePublicIpAddress": True})
    alicloud = res("alicloud:ecs/instance:Instance", "ali-node", {"internetMaxBandwidthOut": 100.0})
    caught = findings([instance, alicloud], "public-ip-on-gpu-node")
    assert [f.urn for f in caught] == [instance.urn, alicloud.urn]


def test_public_subnet_used_by_launch_template_is_caught():
    subnet = res(SUBNET, "nodes-subnet", {"mapPublicIpOnLaunch": True})
    template = good_launch_template(networkInterfaces=[{"deviceIndex": 0.0, "subnetId": "nodes-subnet-id"}])
    [finding] = findings([subnet, template], "public-ip-on-gpu-node")
    assert finding.urn == subnet.urn and "nodes-subnet" in finding.message and "gpu-nodes" in finding.message


def test_public_subnet_used_by_dependency_is_caught():
    subnet = res(SUBNET, "nodes-subnet", {"mapPublicIpOnLaunch": True})
    template = PlannedResource(urn="urn:lt", type=LT, name="gpu-nodes", props={
        "networkInterfaces": [{"deviceIndex": 0.0, "subnetId": None}]},
        property_dependencies={"networkInterfaces": (subnet.urn,)})
    assert [f.urn for f in findings([subnet, template], "public-ip-on-gpu-node")] == [subnet.urn]


def test_private_nodes_and_unused_public_subnets_pass():
    nat_subnet = res(SUBNET, "public-nat", {"mapPublicIpOnLaunch": True})
    private = res(SUBNET, "private", {"mapPublicIpOnLaunch": False})
    instance = res(INSTANCE, "head", {"associatePublicIpAddress": False, "subnetId": "private-id"})
    resources = [nat_subnet, private, good_launch_template(), instance]
    assert findings(resources, "public-ip-on-gpu-node") == []


# ---------------------------------------------------------------- data-store-not-retained

def test_bucket_not_retained_is_caught():
    bucket = res(BUCKET, "checkpoints", {}, retain_on_delete=False)
    [finding] = findings([bucket], "data-store-not-retained")
    assert "checkpoints" in finding.message and "pulumi destroy" in finding.message
    assert "retain_on_delete=True" in finding.message


def test_force_destroy_bucket_is_caught_even_when_retained():
    bucket = res(BUCKET, "datasets", {"forceDestroy": True}, retain_on_delete=True)
    [finding] = findings([bucket], "data-store-not-retained")
    assert "datasets" in finding.message and "forceDestroy" in finding.message


@pytest.mark.parametrize("retain", [True, None], ids=["retained", "unknown"])
def test_retained_or_unknown_bucket_passes(retain):
    assert findings([res(BUCKET, "datasets", {}, retain_on_delete=retain)], "data-store-not-retained") == []


@pytest.mark.parametrize("props", [
    {"deploymentType": "PERSISTENT_2", "skipFinalBackup": True},
    {"deploymentType": "PERSISTENT_2"},  # pulumi-aws 7: skipFinalBackup defaults to true
])
def test_lustre_without_final_backup_is_caught(props):
    lustre = res("aws:fsx/lustreFileSystem:LustreFileSystem", "shared-fs", props)
    [finding] = findings([lustre], "data-store-not-retained")
    assert "shared-fs" in finding.message and "skipFinalBackup=False" in finding.message


@pytest.mark.parametrize("props,retain", [
    ({"deploymentType": "PERSISTENT_2", "skipFinalBackup": False}, None),
    ({"deploymentType": "PERSISTENT_2", "skipFinalBackup": True}, True),
    ({"deploymentType": "SCRATCH_2"}, None),
], ids=["final-backup", "retained", "scratch"])
def test_lustre_with_final_backup_or_retained_passes(props, retain):
    lustre = res("aws:fsx/lustreFileSystem:LustreFileSystem", "shared-fs", props, retain_on_delete=retain)
    assert findings([lustre], "data-store-not-retained") == []


def test_lustre_linked_to_a_bucket_needs_no_final_backup():
    """AWS backs up only persistent file systems not linked to a data repository: a linked one relies on its
    bucket (auto-export, and destroy's export), so skipFinalBackup=True is right there - and only there."""
    lustre = res("aws:fsx/lustreFileSystem:LustreFileSystem", "shared-fs",
                 {"deploymentType": "PERSISTENT_2", "skipFinalBackup": True})
    link = res("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", "link",
               {"fileSystemId": "shared-fs-id", "dataRepositoryPath": "s3://datasets/"})
    elsewhere = res("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", "other",
                    {"fileSystemId": "fs-0fffffffffffffff0", "dataRepositoryPath": "s3://datasets/"})
    assert findings([lustre, link], "data-store-not-retained") == []
    assert findings([lustre, link], "data-store-retention-unverified") == []
    assert len(findings([lustre, elsewhere], "data-store-not-retained")) == 1


# ---------------------------------------------------------------- s3-public-access

BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
ALL_BLOCKED = {"blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
               "restrictPublicBuckets": True}


def _bucket_policy(*statements: dict) -> PlannedResource:
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    return res(BUCKET_POLICY, "checkpoints-policy", {"bucket": "checkpoints-id", "policy": json.dumps(document)})


@pytest.mark.parametrize("principal", ["*", {"AWS": "*"}, {"AWS": ["arn:aws:iam::123456789012:root", "*"]}],
                         ids=["star", "aws-star", "aws-list"])
def test_bucket_policy_allowing_everyone_is_caught(principal):
    policy = _bucket_policy({"Sid": "Read", "Effect": "Allow", "Principal": principal, "Action": "s3:GetObject",
                             "Resource": "arn:aws:s3:::acme/*"})
    [finding] = findings([policy], "s3-public-access")
    assert finding.severity is Severity.ERROR and finding.urn == policy.urn
    assert "Read" in finding.message and "s3:GetObject" in finding.message


def test_bucket_policy_as_a_mapping_with_one_statement_is_caught():
    policy = res(BUCKET_POLICY, "p", {"policy": {"Statement": {"Effect": "Allow", "Principal": "*",
                                                                "Action": ["s3:GetObject", "s3:ListBucket"]}}})
    [finding] = findings([policy], "s3-public-access")
    assert "s3:GetObject, s3:ListBucket" in finding.message


def test_bucket_policy_naming_principals_or_denying_everyone_passes():
    policy = _bucket_policy(
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:role/nodes"}, "Action": "s3:*"},
        {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
    )
    unknown = res(BUCKET_POLICY, "later", {"policy": None})
    assert findings([policy, unknown], "s3-public-access") == []


@pytest.mark.parametrize("off", ["blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"])
def test_public_access_block_with_a_setting_off_is_caught(off):
    turned_off = res(PUBLIC_ACCESS_BLOCK, "checkpoints-private", {**ALL_BLOCKED, off: False})
    unset = res(PUBLIC_ACCESS_BLOCK, "datasets-private", {k: v for k, v in ALL_BLOCKED.items() if k != off})
    caught = findings([turned_off, unset], "s3-public-access")
    assert [f.urn for f in caught] == [turned_off.urn, unset.urn]
    assert all(off in f.message for f in caught)


def test_public_access_block_with_all_four_on_passes():
    assert findings([res(PUBLIC_ACCESS_BLOCK, "private", dict(ALL_BLOCKED))], "s3-public-access") == []


# ---------------------------------------------------------------- data-store-retention-unverified

def test_unknown_retention_is_an_advisory_not_a_pass():
    bucket = res(BUCKET, "datasets", {}, retain_on_delete=None)
    lustre = res("aws:fsx/lustreFileSystem:LustreFileSystem", "shared-fs", {"deploymentType": "PERSISTENT_2"},
                 retain_on_delete=None)
    caught = findings([bucket, lustre], "data-store-retention-unverified")
    assert [f.urn for f in caught] == [bucket.urn, lustre.urn]
    assert all(f.severity is Severity.WARNING and "cannot verify" in f.message for f in caught)
    assert findings([bucket, lustre], "data-store-not-retained") == []


@pytest.mark.parametrize("kwargs", [{"retain_on_delete": True}, {"retain_on_delete": False},
                                    {"retain_on_delete": None, "protect": True}], ids=["kept", "known", "protected"])
def test_known_retention_or_protect_needs_no_advisory(kwargs):
    bucket = res(BUCKET, "datasets", {}, **kwargs)
    scratch = res("aws:fsx/lustreFileSystem:LustreFileSystem", "scratch", {"deploymentType": "SCRATCH_2"},
                  retain_on_delete=None)
    assert findings([bucket, scratch], "data-store-retention-unverified") == []


# ---------------------------------------------------------------- rule set

def test_every_rule_has_a_unique_id_and_a_severity():
    ids = [rule.id for rule in guardrails.RULES]
    assert len(ids) == len(set(ids))
    assert {"untagged-resource", "ssh-open-to-world", "unencrypted-storage", "unencrypted-topic",
            "imdsv1-allowed", "public-ip-on-gpu-node", "data-store-not-retained", "data-store-retention-unverified",
            "s3-public-access"} <= set(ids)
    assert guardrails.RULES[[r.id for r in guardrails.RULES].index("unencrypted-topic")].severity is Severity.WARNING


# ---------------------------------------------------------------- policy pack adapter

def _policy_resource(type_, name, props, *, parent=None, protect=False, provider=True, deps=None):
    """A stand-in for pulumi_policy.PolicyResource: only the attributes the adapter reads."""
    return SimpleNamespace(
        resource_type=type_, props=props, urn=f"urn:pulumi:s::p::{type_}::{name}", name=name,
        opts=SimpleNamespace(protect=protect, parent=parent), parent=None,
        provider=SimpleNamespace(urn="urn:provider") if provider else None,
        property_dependencies=deps or {},
    )


def test_from_policy_resource_converts_plain_data():
    pr = _policy_resource(SG, "nodes", {"id": "sg-123", "ingress": [{"protocol": "tcp"}]}, parent="urn:parent",
                          protect=True)
    planned = guardrails.from_policy_resource(pr)
    assert planned == PlannedResource(urn=pr.urn, type=SG, name="nodes", props={"id": "sg-123", "ingress": [
        {"protocol": "tcp"}]}, id="sg-123", parent_urn="urn:parent", custom=True, retain_on_delete=None,
        protect=True)


def test_from_policy_resource_reads_unknown_values_as_none():
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

    props = unknown_checking_proxy({"bucket": UNKNOWN_STRING_VALUE, "rules": [{"x": UNKNOWN_STRING_VALUE}]})
    dependency = SimpleNamespace(urn="urn:bucket")
    planned = guardrails.from_policy_resource(_policy_resource(SSE, "sse", props, deps={"bucket": [dependency]}))
    assert planned.props == {"bucket": None, "rules": [{"x": None}]}
    assert planned.property_dependencies == {"bucket": ("urn:bucket",)}


def test_from_policy_resource_tells_components_from_custom_resources():
    component = guardrails.from_policy_resource(_policy_resource("goldenenv:aws:GpuCluster", "c", {}, provider=False))
    provider = guardrails.from_policy_resource(_policy_resource("pulumi:providers:aws", "default", {}))
    assert not component.custom and not provider.custom


def test_stack_validation_reports_each_violation_against_its_urn():
    vpc = _policy_resource("aws:ec2/vpc:Vpc", "cluster-vpc", {"tags": {"project": "llm-pretrain"}})
    tagged = _policy_resource("aws:ec2/vpc:Vpc", "other-vpc", {"tags": dict(TAGS)})
    args = SimpleNamespace(resources=[vpc, tagged], get_config=lambda: {"requiredTags": dict(TAGS)})
    rule = next(r for r in guardrails.RULES if r.id == "untagged-resource")
    reported = []
    guardrails.stack_validation(rule)(args, lambda message, urn=None: reported.append((message, urn)))
    assert [urn for _, urn in reported] == [vpc.urn]
    assert "owner" in reported[0][0]


def test_stack_validation_without_config_requires_only_some_tags():
    bare = _policy_resource("aws:ec2/vpc:Vpc", "bare-vpc", {})
    tagged = _policy_resource("aws:ec2/vpc:Vpc", "tagged-vpc", {"tags": {"anything": "x"}})
    args = SimpleNamespace(resources=[bare, tagged], get_config=lambda: {})
    rule = next(r for r in guardrails.RULES if r.id == "untagged-resource")
    reported = []
    guardrails.stack_validation(rule)(args, lambda message, urn=None: reported.append(urn))
    assert reported == [bare.urn]


def _report(rule_id: str, *resources) -> list[tuple[str, str]]:
    rule = next(r for r in guardrails.RULES if r.id == rule_id)
    reported = []
    args = SimpleNamespace(resources=list(resources), get_config=lambda: {})
    guardrails.stack_validation(rule)(args, lambda message, urn=None: reported.append((message, urn)))
    return reported


def test_policy_pack_says_it_cannot_verify_a_bucket_it_cannot_see_retained():
    """A policy resource's options carry protect but no retainOnDelete: the retention is reported unverified."""
    bucket = _policy_resource(BUCKET, "datasets", {"bucket": "acme-datasets"})
    assert not hasattr(bucket.opts, "retain_on_delete")
    assert _report("data-store-not-retained", bucket) == []
    [(message, urn)] = _report("data-store-retention-unverified", bucket)
    assert urn == bucket.urn and "cannot verify" in message and "protect=True" in message
    assert _report("data-store-retention-unverified", _policy_resource(BUCKET, "kept", {}, protect=True)) == []


def test_policy_pack_reads_retain_on_delete_where_the_sdk_offers_it():
    kept = _policy_resource(BUCKET, "kept", {})
    kept.opts.retain_on_delete = True
    dropped = _policy_resource(BUCKET, "dropped", {})
    dropped.opts.retain_on_delete = False
    assert _report("data-store-retention-unverified", kept, dropped) == []
    assert [urn for _, urn in _report("data-store-not-retained", kept, dropped)] == [dropped.urn]


def test_policy_pack_retention_advisory_on_the_policy_sdk_types():
    from pulumi_policy import PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions

    opts = PolicyResourceOptions(protect=False, ignore_changes=[], delete_before_replace=None, aliases=[],
                                 custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[])
    bucket = PolicyResource(BUCKET, {"bucket": "acme"}, "urn:bucket", "datasets", opts, None, None, [], {})
    assert [urn for _, urn in _report("data-store-retention-unverified", bucket)] == ["urn:bucket"]


def test_policy_pack_has_one_policy_per_rule(monkeypatch):
    import pulumi_policy

    built = {}
    monkeypatch.setattr(pulumi_policy, "PolicyPack", lambda name, policies, **_: built.update(
        name=name, policies=policies))
    runpy.run_path(str(REPO / "policy" / "__main__.py"), run_name="__main__")
    assert built["name"] == "goldenenv-guardrails"
    policies = {p.name: p for p in built["policies"]}
    assert set(policies) == {rule.id for rule in guardrails.RULES}
    assert policies["ssh-open-to-world"].enforcement_level is pulumi_policy.EnforcementLevel.MANDATORY
    assert policies["unencrypted-topic"].enforcement_level is pulumi_policy.EnforcementLevel.ADVISORY
    assert policies["data-store-retention-unverified"].enforcement_level is pulumi_policy.EnforcementLevel.ADVISORY
    assert policies["s3-public-access"].enforcement_level is pulumi_policy.EnforcementLevel.MANDATORY
    assert "requiredTags" in policies["untagged-resource"].config_schema.properties


# ---------------------------------------------------------------- the engine form matches the real SDK

def test_rules_read_the_property_names_pulumi_aws_sends():
    """Resources built with pulumi-aws under mocks (in a subprocess: mocks are process-global)."""
    script = textwrap.dedent("""
        import json, pulumi
        from goldenenv.guardrails import PlannedResource, evaluate
        recorded = []
        class Mocks(pulumi.runtime.Mocks):
            def new_resource(self, args):
                recorded.append(PlannedResource(urn=args.name, type=args.typ, name=args.name,
                                                props=args.inputs, id=args.name + "-id", retain_on_delete=False))
                return [args.name + "-id", args.inputs]
            def call(self, args):
                return {}
        pulumi.runtime.set_mocks(Mocks(), preview=False)
        import pulumi_aws as aws

        @pulumi.runtime.test
        def program():
            tags = {"project": "p"}
            kinds = ["instance", "volume", "network-interface"]
            lt = aws.ec2.LaunchTemplate("lt", tags=tags,
                tag_specifications=[{"resource_type": k, "tags": tags} for k in kinds],
                block_device_mappings=[{"device_name": "/dev/xvda", "ebs": {"encrypted": "true"}}],
                metadata_options={"http_tokens": "required"},
                network_interfaces=[{"device_index": 0, "associate_public_ip_address": "true"}])
            sg = aws.ec2.SecurityGroup("sg", tags=tags, ingress=[
                {"protocol": "tcp", "from_port": 22, "to_port": 22, "cidr_blocks": ["0.0.0.0/0"]}])
            bucket = aws.s3.Bucket("bucket", tags=tags, force_destroy=True)
            sse = aws.s3.BucketServerSideEncryptionConfiguration("sse", bucket=bucket.id,
                rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"}}])
            pab = aws.s3.BucketPublicAccessBlock("pab", bucket=bucket.id, block_public_acls=True,
                block_public_policy=True, ignore_public_acls=True, restrict_public_buckets=False)
            policy = aws.s3.BucketPolicy("policy", bucket=bucket.id, policy=json.dumps({"Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "s3:GetObject", "Resource": "*"}]}))
            return pulumi.Output.all(lt.id, sg.id, sse.id, pab.id, policy.id)

        program()
        print(json.dumps(sorted({(f.rule, f.urn) for f in evaluate(recorded, {"project": "p"})})))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 0, result.stderr
    caught = {tuple(pair) for pair in json.loads(result.stdout.strip().splitlines()[-1])}
    assert caught == {("public-ip-on-gpu-node", "lt"), ("ssh-open-to-world", "sg"),
                      ("data-store-not-retained", "bucket"), ("s3-public-access", "pab"),
                      ("s3-public-access", "policy")}


def test_stack_validation_runs_on_the_policy_sdk_types():
    from pulumi_policy import PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions, StackValidationArgs
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

    opts = PolicyResourceOptions(protect=False, ignore_changes=[], delete_before_replace=None, aliases=[],
                                 custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[])
    props = unknown_checking_proxy({"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22,
                                                 "cidrBlocks": ["0.0.0.0/0"]}], "vpcId": UNKNOWN_STRING_VALUE})
    group = PolicyResource(SG, props, "urn:sg", "nodes", opts, None, None, [], {})
    rule = next(r for r in guardrails.RULES if r.id == "ssh-open-to-world")
    reported = []
    guardrails.stack_validation(rule)(StackValidationArgs([group]), lambda m, urn=None: reported.append((m, urn)))
    assert len(reported) == 1 and reported[0][1] == "urn:sg" and "'nodes'" in reported[0][0]


def test_is_taggable_reaches_sdk_modules_named_after_python_keywords():
    assert is_taggable("aws:lambda/function:Function")


# ---------------------------------------------------------------- the cloud seam: each provider's facts

ACME_GROUP = "acme:net/firewall:Firewall"
ACME_RULE = "acme:net/firewallRule:FirewallRule"
ACME_VM = "acme:compute/vm:Vm"
ACME_BUCKET = "acme:storage/bucket:Bucket"


def _acme_ingress(resource: PlannedResource) -> list[guardrails.Ingress]:
    """A made-up provider: rules carry "allow": "tcp:22" and "from": [cidrs], inline or standalone."""
    rules = resource.props.get("rules", []) if resource.type == ACME_GROUP else (
        [resource.props] if resource.type == ACME_RULE else [])
    permissions = []
    for rule in rules:
        protocol, _, port = rule["allow"].partition(":")
        permissions += [guardrails.Ingress(protocol, int(port), int(port), cidr) for cidr in rule["from"]]
    return permissions


def _acme_public_ip(resource: PlannedResource, ctx) -> list[str]:
    return [f"vm '{resource.name}' is public"] if resource.type == ACME_VM and resource.props.get("publicIp") else []


def _acme_encryption(resource: PlannedResource, ctx) -> list[str]:
    return [f"vm '{resource.name}' disk is plain"] if resource.type == ACME_VM and not resource.props.get(
        "diskKey") else []


ACME = guardrails.ProviderFacts(
    name="acme", security_groups=(ACME_GROUP,), standalone_ingress_rules=(ACME_RULE,), group_property="firewallId",
    ingress=_acme_ingress, public_ip=_acme_public_ip, storage_encryption=_acme_encryption,
    data_stores=(ACME_BUCKET,),
)


@pytest.fixture
def acme(monkeypatch):
    """The made-up provider, registered for this test only."""
    guardrails.provider_facts()  # the clouds' own facts first, as in any run
    monkeypatch.setitem(guardrails.PROVIDERS, ACME.name, ACME)
    return ACME


def test_a_third_providers_facts_are_applied_by_the_generic_rules(acme):
    world_ssh = res(ACME_GROUP, "nodes", {"rules": [{"allow": "tcp:22", "from": ["0.0.0.0/0"]}]})
    jupyter = res(ACME_RULE, "jupyter", {"allow": "tcp:8888", "from": ["::/0"]})
    vm = res(ACME_VM, "gpu-0", {"publicIp": True})
    bucket = res(ACME_BUCKET, "checkpoints", {"forceDestroy": True}, retain_on_delete=False)
    resources = [world_ssh, jupyter, vm, bucket]
    [ssh] = findings(resources, "ssh-open-to-world")
    assert ssh.urn == world_ssh.urn and "'nodes'" in ssh.message and "tcp 22-22 from 0.0.0.0/0" in ssh.message
    [ingress] = findings(resources, "ingress-open-to-world")
    assert ingress.urn == jupyter.urn and "tcp 8888-8888 from ::/0" in ingress.message
    assert [f.message for f in findings(resources, "public-ip-on-gpu-node")] == ["vm 'gpu-0' is public"]
    assert [f.message for f in findings(resources, "unencrypted-storage")] == ["vm 'gpu-0' disk is plain"]
    kept = findings(resources, "data-store-not-retained")
    assert [f.urn for f in kept] == [bucket.urn, bucket.urn]
    assert "retain_on_delete=True" in kept[0].message and "forceDestroy" in kept[1].message


def test_a_third_providers_standalone_rules_join_their_group_by_its_own_property(acme):
    """2.0.0.0/8 and 3.0.0.0/8 each pass; a rule naming the group by the provider's property makes them a /7."""
    group = res(ACME_GROUP, "nodes", {"rules": [{"allow": "tcp:22", "from": ["2.0.0.0/8"]}]})
    joined = res(ACME_RULE, "admin-2", {"firewallId": "nodes-id", "allow": "tcp:22", "from": ["3.0.0.0/8"]})
    [finding] = findings([group, joined], "ssh-open-to-world")
    assert finding.urn == group.urn and "2.0.0.0/7" in finding.message and "'admin-2'" in finding.message
    apart = res(ACME_RULE, "admin-3", {"securityGroupId": "nodes-id", "allow": "tcp:22", "from": ["3.0.0.0/8"]})
    [together] = findings([group, apart], "ssh-open-to-world")  # judged apart, then across the plan's groups
    assert together.urn == group.urn and "security groups of this plan, together" in together.message


def test_without_its_facts_a_providers_resources_are_not_judged():
    world_ssh = res(ACME_GROUP, "nodes", {"rules": [{"allow": "tcp:22", "from": ["0.0.0.0/0"]}]})
    assert findings([world_ssh], "ssh-open-to-world") == []


def test_the_clouds_facts_are_found_in_their_folders():
    found = {facts.name: facts for facts in guardrails.provider_facts()}
    assert {"aws", "alicloud"} <= set(found)
    assert "aws:ec2/securityGroup:SecurityGroup" in found["aws"].security_groups
    assert "alicloud:oss/bucket:Bucket" in found["alicloud"].data_stores


def test_a_new_clouds_facts_module_is_discovered_without_editing_the_rules(tmp_path, monkeypatch):
    cloud = tmp_path / "someclouds" / "acme"
    cloud.mkdir(parents=True)
    (cloud.parent / "__init__.py").write_text("")
    (cloud / "__init__.py").write_text("")
    (tmp_path / "someclouds" / "nofacts").mkdir()
    (tmp_path / "someclouds" / "nofacts" / "__init__.py").write_text("raise ImportError('not a facts cloud')\n")
    (cloud / "guardrail_facts.py").write_text(textwrap.dedent("""
        from goldenenv.guardrails import Ingress, ProviderFacts

        def ingress(resource):
            if resource.type != "acme:net/firewall:Firewall":
                return []
            return [Ingress("tcp", 22, 22, cidr) for cidr in resource.props.get("sshFrom", [])]

        FACTS = ProviderFacts(name="acme", security_groups=("acme:net/firewall:Firewall",), ingress=ingress)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(guardrails, "FACTS_PACKAGE", "someclouds")
    monkeypatch.setattr(guardrails, "PROVIDERS", {})
    monkeypatch.setattr(guardrails, "_found", False)
    assert [f.name for f in guardrails.provider_facts()] == ["acme"]
    group = res(ACME_GROUP, "nodes", {"sshFrom": ["0.0.0.0/0"]})
    assert [f.urn for f in findings([group], "ssh-open-to-world")] == [group.urn]
    for name in [m for m in sys.modules if m == "someclouds" or m.startswith("someclouds.")]:
        monkeypatch.delitem(sys.modules, name)


def test_importing_the_rules_loads_no_cloud():
    """The policy pack and spec.py import guardrails: no provider SDK, no cloud package until rules run."""
    script = ("import sys, goldenenv.guardrails; "
              "print(sorted(m for m in sys.modules if m.startswith(('pulumi', 'goldenenv.clouds'))))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


PROVIDER_ALONE_RULES = {"unencrypted-storage": "storage_encryption", "unencrypted-topic": "topic_encryption",
                        "imdsv1-allowed": "metadata", "public-ip-on-gpu-node": "public_ip",
                        "s3-public-access": "public_data"}


def test_each_provider_alone_rule_asks_its_own_hook_of_every_provider_in_order():
    def speaking(provider: str) -> guardrails.ProviderFacts:
        hooks = {hook: (lambda hook: lambda resource, ctx: [f"{provider} {hook} {resource.name}"])(hook)
                 for hook in PROVIDER_ALONE_RULES.values()}
        return guardrails.ProviderFacts(name=provider, **hooks)

    vm = res(ACME_VM, "gpu-0")
    ctx = guardrails.Context((vm,), {}, providers=(speaking("first"), speaking("second")))
    rules = {rule.id: rule for rule in guardrails.RULES}
    for rule_id, hook in PROVIDER_ALONE_RULES.items():
        assert [(f.urn, f.message) for f in guardrails.check_rule(rules[rule_id], ctx)] == [
            (vm.urn, f"first {hook} gpu-0"), (vm.urn, f"second {hook} gpu-0")], rule_id


# ---------------------------------------------------------------- slurmctld-beyond-cluster, public-ip-on-head

ALI_RULE = "alicloud:ecs/securityGroupRule:SecurityGroupRule"
ALI_INSTANCE = "alicloud:ecs/instance:Instance"
V_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


def test_guardrails_name_slurmctlds_port_as_the_contract_does():
    from goldenenv import slurm

    assert guardrails.SLURMCTLD_PORT == slurm.SLURMCTLD_PORT == 6817


@pytest.mark.parametrize("resource", [
    # the head's group open to the VPC's range: an address range, not the nodes' group
    res(SG, "head", {"ingress": [{"protocol": "tcp", "fromPort": 6817, "toPort": 6817, "cidrBlocks": ["10.0.0.0/8"]}]}),
    # all traffic from an office range reaches slurmctld too
    res(SG, "head", {"ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["203.0.113.0/24"]}]}),
    res(V_INGRESS, "head-in", {"ipProtocol": "tcp", "fromPort": 6800, "toPort": 6900, "cidrIpv4": "0.0.0.0/0",
                               "securityGroupId": "sg-1"}),
    res(ALI_RULE, "head-in", {"type": "ingress", "ipProtocol": "tcp", "portRange": "6817/6817",
                              "cidrIp": "192.168.0.0/16", "securityGroupId": "sg-1"}),
])
def test_slurmctld_open_to_an_address_range_is_caught(resource):
    found = findings([resource], "slurmctld-beyond-cluster")
    assert len(found) == 1 and found[0].severity is Severity.ERROR and "6817" in found[0].message


@pytest.mark.parametrize("resource", [
    res(V_INGRESS, "head-in", {"ipProtocol": "tcp", "fromPort": 6817, "toPort": 6817,
                               "referencedSecurityGroupId": "sg-nodes", "securityGroupId": "sg-head"}),
    res(ALI_RULE, "head-in", {"type": "ingress", "ipProtocol": "tcp", "portRange": "6817/6817",
                              "sourceSecurityGroupId": "sg-nodes", "securityGroupId": "sg-head"}),
    res(SG, "nodes", {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["10.0.0.0/8"]}]}),
])
def test_slurmctld_reached_from_the_nodes_group_only_passes(resource):
    assert findings([resource], "slurmctld-beyond-cluster") == []


def _head(type_: str, props: dict, cloud: str = "aws") -> PlannedResource:
    urn = f"urn:pulumi:test::goldenenv::goldenenv:{cloud}:GpuCluster$goldenenv:{cloud}:SlurmHead${type_}::test-head"
    return PlannedResource(urn=urn, type=type_, name="test-head", props=props, id="test-head-id")


@pytest.mark.parametrize("head", [
    _head(INSTANCE, {"associatePublicIpAddress": True}),
    _head(INSTANCE, {}),  # unset: follows the subnet's mapPublicIpOnLaunch
    _head(ALI_INSTANCE, {"internetMaxBandwidthOut": 5}, "alicloud"),
    _head(ALI_INSTANCE, {}, "alicloud"),
])
def test_a_head_that_may_get_a_public_ip_is_caught(head):
    found = findings([head], "public-ip-on-head")
    assert len(found) == 1 and found[0].severity is Severity.ERROR and "Slurm head" in found[0].message


def test_a_private_head_passes_and_other_instances_are_not_the_heads_business():
    assert findings([_head(INSTANCE, {"associatePublicIpAddress": False}),
                     _head(ALI_INSTANCE, {"internetMaxBandwidthOut": 0}, "alicloud"),
                     res(INSTANCE, "gpu-0", {})], "public-ip-on-head") == []
