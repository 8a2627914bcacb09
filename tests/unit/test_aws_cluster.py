"""The AWS program under Pulumi's mock runtime: what `pulumi up` would create, checked offline."""

from __future__ import annotations

import base64
import copy

import pytest
import yaml

from goldenenv import catalog, stackconfig
from goldenenv.clouds.aws import reaper
from goldenenv.clouds.aws.budget import cost_filter_value
from goldenenv.plan import plan, plan_config, stack_file
from goldenenv.spec import STACK_TAG_KEY

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
EXAMPLES = ["aws-p5-2node", "aws-p4d-4node-spot", "aws-g5-dev"]


def example_config(stack: str = "aws-p5-2node") -> dict:
    return stackconfig.read_stack_file(stack_file(stack))


def with_nodes(stack: str = "aws-p5-2node", **changes) -> dict:
    config = copy.deepcopy(example_config(stack))
    config["goldenenv:nodes"].update(changes)
    return config


def gpu_nodes(p):
    """The pools' nodes: the instances launched from a launch template (the Slurm head is an instance of its own)."""
    return [r for r in p.of_type(INSTANCE) if "launchTemplate" in r.props]


def one(p, type_token):
    found = p.of_type(type_token)
    assert len(found) == 1, f"expected one {type_token}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def p5():
    return plan("aws-p5-2node")


@pytest.mark.parametrize("stack", EXAMPLES)
def test_example_stacks_plan_without_failed_guardrails(stack):
    result = plan(stack)
    assert not result.failed, [f.message for f in result.findings if f.severity.value == "error"]
    nodes = gpu_nodes(result)
    assert len(nodes) == sum(pool.count for pool in result.spec.nodes)
    assert len(result.of_type(INSTANCE)) == len(nodes) + 1, "and the Slurm head"


EFA_TYPES = sorted(name for name, it in catalog.instance_types("aws").items() if it.rdma == "efa")


@pytest.mark.parametrize("instance_type", EFA_TYPES)
def test_launch_template_carries_catalog_efa_count_in_aws_layout(instance_type):
    it = catalog.instance_type("aws", instance_type)
    result = plan_config("efa-layout", with_nodes(instanceType=instance_type, efa=True))
    interfaces = one(result, LT).props["networkInterfaces"]

    efa = [ni for ni in interfaces if ni["interfaceType"] == "efa-only"]
    primary = [ni for ni in interfaces if ni["interfaceType"] == "interface"]
    assert len(efa) == it.rdma_interfaces
    assert len(primary) == 1
    assert (primary[0]["networkCardIndex"], primary[0]["deviceIndex"]) == (0, 0)
    cards = sorted(ni["networkCardIndex"] for ni in efa)
    assert cards == list(range(it.rdma_interfaces)), "one EFA per network card, cards 0..n-1"
    assert all(ni["deviceIndex"] == (1 if ni["networkCardIndex"] == 0 else 0) for ni in efa)
    assert max(cards) < it.network_cards
    for ni in interfaces:
        assert ni["securityGroups"], "security groups go on every interface"
        assert ni["associatePublicIpAddress"] == "false"


def test_p5_has_two_nodes_with_32_efa_each_in_one_placement_group_and_subnet(p5):
    template = one(p5, LT)
    group = one(p5, "aws:ec2/placementGroup:PlacementGroup")
    subnet = next(r for r in p5.of_type("aws:ec2/subnet:Subnet") if r.name.endswith("-private"))
    nodes = gpu_nodes(p5)

    assert group.props["strategy"] == "cluster"
    assert p5.outputs["placementGroups"] == [template.props["placement"]["groupName"]]
    assert len(nodes) == 2
    assert all(n.props["launchTemplate"]["id"] == template.id for n in nodes)
    assert {ni["subnetId"] for ni in template.props["networkInterfaces"]} == {subnet.id}
    efa = [ni for ni in template.props["networkInterfaces"] if ni["interfaceType"] == "efa-only"]
    assert len(efa) == catalog.instance_type("aws", "p5.48xlarge").rdma_interfaces


def test_nodes_require_imdsv2_and_encrypt_the_root_volume(p5):
    template = one(p5, LT)
    assert template.props["metadataOptions"]["httpTokens"] == "required"
    (root,) = template.props["blockDeviceMappings"]
    assert root["ebs"]["encrypted"] == "true"
    assert root["ebs"]["volumeType"] == "gp3"


def test_every_taggable_resource_carries_the_stack_tags(p5):
    from goldenenv.guardrails import is_taggable

    wanted = p5.spec.stack_tags
    taggable = [r for r in p5.resources if r.custom and is_taggable(r.type)]
    assert len(taggable) > 20
    for r in taggable:
        tags = r.props.get("tags") or {}
        assert {k: tags.get(k) for k in wanted} == wanted, f"{r.name} ({r.type}) lacks stack tags"
    kinds = {spec["resourceType"] for spec in one(p5, LT).props["tagSpecifications"]}
    assert kinds == {"instance", "volume", "network-interface"}
    assert all(spec["tags"][STACK_TAG_KEY] == "aws-p5-2node" for spec in one(p5, LT).props["tagSpecifications"])
    provider = one(p5, "pulumi:providers:aws")
    assert yaml.safe_load(provider.props["defaultTags"])["tags"] == wanted


def test_no_ssh_from_the_internet(p5):
    for group in p5.of_type("aws:ec2/securityGroup:SecurityGroup"):
        for rule in group.props.get("ingress", []):
            open_to_world = "0.0.0.0/0" in (rule.get("cidrBlocks") or [])
            covers_ssh = rule["protocol"] == "-1" or rule["fromPort"] <= 22 <= rule["toPort"]
            assert not (open_to_world and covers_ssh), f"{group.name} opens SSH to the world"


def test_node_security_group_allows_all_traffic_to_and_from_itself(p5):
    nodes = next(r for r in p5.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-nodes"))
    assert any(r["protocol"] == "-1" and r.get("self") for r in nodes.props["ingress"])
    assert any(r["protocol"] == "-1" and r.get("self") for r in nodes.props["egress"])


def test_admin_cidr_opens_ssh_only_to_that_network():
    config = copy.deepcopy(example_config())
    config["goldenenv:network"]["adminCidrs"] = ["203.0.113.0/24"]
    result = plan_config("admin", config)
    nodes = next(r for r in result.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-nodes"))
    ssh = [r for r in nodes.props["ingress"] if r["protocol"] == "tcp" and r["fromPort"] == 22]
    assert [r["cidrBlocks"] for r in ssh] == [["203.0.113.0/24"]]


def test_bucket_is_encrypted_versioned_private_and_retained(p5):
    bucket = one(p5, "aws:s3/bucket:Bucket")
    sse = one(p5, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    versioning = one(p5, "aws:s3/bucketVersioning:BucketVersioning")
    block = one(p5, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    lifecycle = one(p5, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")

    assert bucket.retain_on_delete is True and not bucket.props.get("forceDestroy")
    assert sse.props["bucket"] == versioning.props["bucket"] == block.props["bucket"] == bucket.id
    assert sse.props["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert versioning.props["versioningConfiguration"]["status"] == "Enabled"
    assert all(block.props[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                        "restrictPublicBuckets"))
    expiry = next(r for r in lifecycle.props["rules"] if "noncurrentVersionExpiration" in r)
    assert expiry["filter"]["prefix"] == p5.spec.storage.parallel_fs.checkpoint_prefix


def test_lustre_sits_in_the_nodes_subnet_and_is_linked_to_the_bucket(p5):
    fs = one(p5, "aws:fsx/lustreFileSystem:LustreFileSystem")
    link = one(p5, "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    one(p5, "aws:s3/bucket:Bucket")  # the stack has exactly one bucket, the one linked below
    template = one(p5, LT)

    assert fs.props["subnetIds"] == template.props["networkInterfaces"][0]["subnetId"]
    assert fs.props["deploymentType"] == "PERSISTENT_2"
    assert fs.props["skipFinalBackup"] is True  # linked to S3: AWS backs up no linked file system; destroy exports
    assert link.props["fileSystemId"] == fs.id
    assert link.props["dataRepositoryPath"] == f"s3://{p5.outputs['bucket']}/"
    assert link.props["s3"]["autoExportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]
    assert p5.outputs["fsxMount"].endswith(f" on {p5.spec.storage.parallel_fs.mount_point}")


def test_budget_filters_on_the_stack_tag_and_alerts_at_each_threshold(p5):
    budget = one(p5, "aws:budgets/budget:Budget")
    assert budget.props["costFilters"] == [
        {"name": "TagKeyValue", "values": [cost_filter_value(STACK_TAG_KEY, "aws-p5-2node")]}
    ]
    assert float(budget.props["limitAmount"]) == p5.spec.budget.monthly_limit
    got = sorted((n["threshold"], n["notificationType"]) for n in budget.props["notifications"])
    wanted = {(float(t), "ACTUAL") for t in p5.spec.budget.alert_thresholds} | {(100.0, "ACTUAL")} | {
        (float(t), "FORECASTED") for t in p5.spec.budget.forecast_thresholds}
    assert got == sorted(wanted)
    assert len(got) == 4 <= 5  # AWS Budgets: stay within 5 notifications per budget (limits.BUDGET_NOTIFICATIONS)
    assert p5.outputs["budgetName"] == budget.props["name"]


def test_hard_stop_is_the_stacks_function_on_the_budgets_100_percent_topic(p5):
    assert p5.of_type("aws:budgets/budgetAction:BudgetAction") == []
    budget = one(p5, "aws:budgets/budget:Budget")
    # the stack's other topic is FunctionAlerts' (its functions' Errors alarms, email only)
    (topic,) = [t for t in p5.of_type("aws:sns/topic:Topic") if t.parent_urn == budget.parent_urn]
    (alert,) = [n for n in budget.props["notifications"] if n.get("subscriberSnsTopicArns")]
    assert (alert["threshold"], alert["notificationType"]) == (100.0, "ACTUAL")
    assert [a.rsplit(":", 1)[-1] for a in alert["subscriberSnsTopicArns"]] == [topic.name]
    (subscription,) = [s for s in p5.of_type("aws:sns/topicSubscription:TopicSubscription")
                       if s.props["protocol"] == "lambda"]
    assert subscription.props["topic"].rsplit(":", 1)[-1] == topic.name
    (function,) = [f for f in p5.of_type("aws:lambda/function:Function")
                   if f.name == subscription.props["endpoint"].rsplit(":", 1)[-1]]
    env = function.props["environment"]["variables"]
    assert (env[reaper.PROJECT_ENV], env[reaper.STACK_ENV]) == (p5.spec.tags.project, p5.spec.stack)


def test_no_hard_stop_means_no_hard_stop_topic():
    config = copy.deepcopy(example_config())
    config["goldenenv:budget"]["hardStop"] = False
    soft = plan_config("soft", config)
    hard_stop = [r for r in soft.resources if r.type in ("aws:sns/topic:Topic", "aws:sns/topicSubscription:TopicSubscription")
                 and ":StackBudget" in r.urn.split("::")[2]]
    assert hard_stop == [] and soft.of_type("aws:lambda/permission:Permission") == []
    # the ttl reaper's Errors alarm still emails the budget's addresses: through the alert topic, never a function
    assert {s.props["protocol"] for s in soft.of_type("aws:sns/topicSubscription:TopicSubscription")} == {"email"}


def test_hostfile_has_one_line_per_node_with_slots_equal_to_gpus(p5):
    gpus = catalog.instance_type("aws", "p5.48xlarge").gpu_count
    lines = p5.outputs["hostfile"].splitlines()
    assert lines == [f"{ip} slots={gpus}" for ip in p5.outputs["nodePrivateIps"]]
    env = p5.outputs["launchEnv"]
    assert env["MASTER_ADDR"] == p5.outputs["nodePrivateIps"][0]
    assert (env["NNODES"], env["NPROC_PER_NODE"]) == ("2", str(gpus))
    assert len(p5.outputs["ssmConnect"]) == 2


def test_user_data_mounts_storage_and_writes_the_fabric_env(p5):
    text = base64.b64decode(one(p5, LT).props["userData"]).decode()
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    env = dict(line.split("=", 1) for line in files["/etc/goldenenv/launch.env"].splitlines()
               if line and not line.startswith("#"))
    for name, value in catalog.fabric_env("efa").items():
        assert env[name] == value
    mount = next(c for p, c in files.items() if p.endswith("fsx-mount.sh"))
    lustre_source = p5.outputs["fsxMount"].split(" on ")[0]
    assert f"source_path={lustre_source}\n" in mount
    # the DLAMI stripes the instance store itself (catalog host_images): scratch reuses its volume, no RAID0 of ours
    scratch = files["/etc/systemd/system/goldenenv-scratch.service"]
    assert "After=local-fs.target dlami-nvme.service" in scratch and "scratch-host-volume.sh" in scratch
    assert not any(p.endswith("nvme-raid0.sh") for p in files)
    assert doc["runcmd"] == sorted(p for p in files if p.startswith("/usr/local/lib/goldenenv/"))


def test_a_pool_without_efa_gets_no_placement_group_and_no_efa():
    result = plan("aws-g5-dev")
    assert result.of_type("aws:ec2/placementGroup:PlacementGroup") == []
    kinds = [ni["interfaceType"] for ni in one(result, LT).props["networkInterfaces"]]
    assert kinds == ["interface"]
    assert result.of_type("aws:fsx/lustreFileSystem:LustreFileSystem") == []


def test_efa_false_turns_efa_off_on_an_efa_type():
    result = plan_config("no-efa", with_nodes(efa=False))
    kinds = [ni["interfaceType"] for ni in one(result, LT).props["networkInterfaces"]]
    assert kinds == ["interface"]


def test_spot_and_capacity_reservation_reach_the_launch_template():
    spot = one(plan("aws-p4d-4node-spot"), LT).props
    assert spot["instanceMarketOptions"]["marketType"] == "spot"
    assert "capacityReservationSpecification" not in spot

    reserved = one(plan_config("cr", with_nodes(capacity="capacity-reservation",
                                                capacityReservationId="cr-0123456789abcdef0")), LT).props
    target = reserved["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target["capacityReservationId"] == "cr-0123456789abcdef0"
    assert "instanceMarketOptions" not in reserved


def test_node_role_reaches_only_the_stacks_bucket(p5):
    import json

    access = next(r for r in p5.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-bucket-access"))
    resources = sorted(s["Resource"] for s in json.loads(access.props["policy"])["Statement"])
    bucket_arn = resources[0]
    assert bucket_arn.endswith(one(p5, "aws:s3/bucket:Bucket").name)
    assert resources == [bucket_arn, f"{bucket_arn}/*"]


def test_endpoints_egress_has_no_nat_and_reaches_ssm_privately():
    config = copy.deepcopy(example_config())
    config["goldenenv:network"]["egress"] = "endpoints"
    result = plan_config("private", config)
    assert result.of_type("aws:ec2/natGateway:NatGateway") == []
    services = {r.props["serviceName"].rsplit(".", 1)[-1] for r in result.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")}
    assert {"ssm", "ssmmessages", "ec2messages", "s3"} <= services


# ---------------------------------------------------------------- FSx for Lustre security groups, boot units

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
# AWS FSx for Lustre User Guide, "File system access control with Amazon VPC": TCP 988 and 1018-1023.
LUSTRE = [(988, 988), (1018, 1023)]


def group_permissions(result) -> set[tuple[str, str, str, int, int]]:
    """(direction, group, peer group, from port, to port) of every rule between security groups, inline or not."""
    groups = {g.id: g.name.rsplit("-", 1)[-1] for g in result.of_type(SECURITY_GROUP)}
    found = set()

    def add(direction, group, peer, protocol, lo, hi):
        if protocol in ("-1", "all"):
            found.add((direction, group, peer, 0, 65535))
        elif protocol in ("tcp", "6"):
            found.add((direction, group, peer, int(lo), int(hi)))

    for g in result.of_type(SECURITY_GROUP):
        name = groups[g.id]
        for direction in ("ingress", "egress"):
            for rule in g.props.get(direction) or []:
                peers = [groups[i] for i in rule.get("securityGroups") or []] + ([name] if rule.get("self") else [])
                for peer in peers:
                    add(direction, name, peer, rule["protocol"], rule["fromPort"], rule["toPort"])
    for type_token, direction in (("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "ingress"),
                                  ("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "egress")):
        for r in result.of_type(type_token):
            if r.props.get("referencedSecurityGroupId"):
                add(direction, groups[r.props["securityGroupId"]], groups[r.props["referencedSecurityGroupId"]],
                    r.props["ipProtocol"], r.props.get("fromPort", 0), r.props.get("toPort", 65535))
    return found


def assert_lustre_both_ways(result):
    allowed = group_permissions(result)

    def opens(direction, group, peer, lo, hi):
        return any(d == direction and g == group and p == peer and a <= lo and hi <= b for d, g, p, a, b in allowed)

    for direction in ("ingress", "egress"):
        for lo, hi in LUSTRE:
            for group, peer in (("storage", "nodes"), ("nodes", "storage"), ("storage", "storage")):
                assert opens(direction, group, peer, lo, hi), f"{group} {direction} {lo}-{hi} with {peer}"


def test_lustre_ports_are_open_both_ways_between_nodes_and_file_servers(p5):
    assert_lustre_both_ways(p5)
    storage = next(g for g in p5.of_type(SECURITY_GROUP) if g.name.endswith("-storage"))
    nodes = next(g for g in p5.of_type(SECURITY_GROUP) if g.name.endswith("-nodes"))
    assert one(p5, "aws:fsx/lustreFileSystem:LustreFileSystem").props["securityGroupIds"] == [storage.id]
    for ni in one(p5, LT).props["networkInterfaces"]:
        assert nodes.id in ni["securityGroups"]


def test_lustre_rules_hold_without_nat_when_egress_is_endpoints():
    config = copy.deepcopy(example_config())
    config["goldenenv:network"]["egress"] = "endpoints"
    result = plan_config("private-lustre", config)
    assert result.of_type("aws:ec2/natGateway:NatGateway") == []
    assert_lustre_both_ways(result)
    storage = next(g for g in result.of_type(SECURITY_GROUP) if g.name.endswith("-storage"))
    rules = [r for r in result.resources if r.type.startswith("aws:vpc/securityGroup")
             and r.props.get("securityGroupId") == storage.id]
    assert rules, "the file servers' Lustre rules are their own resources"
    for r in rules:
        assert not r.props.get("cidrIpv4") and not r.props.get("cidrIpv6"), "Lustre only between the two groups"
        assert r.props["tags"][STACK_TAG_KEY] == "private-lustre"


def test_user_data_enables_units_that_remount_storage_on_every_boot(p5):
    doc = yaml.safe_load(base64.b64decode(one(p5, LT).props["userData"]).decode())
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    for name in ("goldenenv-scratch.service", "goldenenv-fsx.service"):
        assert "WantedBy=multi-user.target" in files[f"/etc/systemd/system/{name}"].splitlines()
    enable = "\n".join(files[step] for step in doc["runcmd"])
    assert "systemctl daemon-reload" in enable
    enabled = next(line for line in enable.splitlines() if line.startswith("systemctl enable --now"))
    assert {"goldenenv-scratch.service", "goldenenv-fsx.service"} <= set(enabled.split())
