"""The guardrails as a reviewer judges them: one mutation table, run against every shipped stack of every cloud.

Each shipped stack is planned once (a module-scoped cache); each row copies its planned resources, makes one
change a reviewer would refuse, and runs the rules over the copy in memory (no re-plan), expecting its rule to fire
where it did not before. A row is written once over a cloud adapter (``Cloud``): what "the nodes' security
group", "give a node a public address" or "drop the bucket's encryption" means in each provider's resources. A new
cloud adds its adapter here and its facts in goldenenv/clouds/<cloud>/guardrail_facts.py, and the whole table runs
against its stacks. The probe's cases (project issue 22) are the table's first rows.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import shipped
import yaml

from goldenenv import guardrails
from goldenenv.guardrails import PlannedResource, Severity

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"


def _stack_configs() -> dict[str, dict[str, Any]]:
    configs = {}
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(path.read_text()) or {}).get("config", {})
        configs[path.name[len("Pulumi."):-len(".yaml")]] = config
    return configs


CONFIGS = _stack_configs()


def _hard_stop(config: dict[str, Any]) -> bool:
    budget = config.get("goldenenv:budget")
    return isinstance(budget, dict) and budget.get("hardStop") is True


# ---------------------------------------------------------------- a plan's resources, mutable


class Plan:
    """A copy of one stack's planned resources for one mutation, with the helpers rows use."""

    def __init__(self, stack: str, resources: list[PlannedResource]):
        self.stack = stack
        self.resources = [dataclasses.replace(r, props=copy.deepcopy(dict(r.props))) for r in resources]

    def of(self, type_: str | tuple[str, ...]) -> list[PlannedResource]:
        return [r for r in self.resources if r.type in (type_ if isinstance(type_, tuple) else (type_,))]

    def one(self, type_: str, suffix: str = "") -> PlannedResource:
        found = [r for r in self.of(type_) if r.name.endswith(suffix)]
        assert found, f"{self.stack} plans no {type_} named *{suffix}"
        return found[0]

    def nodes(self, instance_type: str | tuple[str, ...]) -> list[PlannedResource]:
        """The GPU nodes: instances inside a node pool component."""
        return [r for r in self.of(instance_type)
                if any(t.endswith(":GpuNodePool") for t in r.urn.split("::")[2].split("$")[:-1])]

    def set(self, resource: PlannedResource, **props: Any) -> PlannedResource:
        """Replace ``resource`` by a copy with ``props`` set (a None value removes the property)."""
        index = next(i for i, r in enumerate(self.resources) if r.urn == resource.urn)
        merged = {**resource.props, **props}
        new = dataclasses.replace(resource, props={k: v for k, v in merged.items() if v is not None})
        self.resources[index] = new
        return new

    def drop(self, predicate: Callable[[PlannedResource], bool]) -> None:
        before = len(self.resources)
        self.resources = [r for r in self.resources if not predicate(r)]
        assert len(self.resources) < before, f"{self.stack}: the mutation dropped nothing"

    def add(self, type_: str, name: str, props: dict[str, Any]) -> PlannedResource:
        urn = f"urn:pulumi:{self.stack}::goldenenv::{type_}::{name}"
        new = PlannedResource(urn=urn, type=type_, name=name, props=props, id=f"{name}-id", retain_on_delete=False,
                              protect=False)
        self.resources.append(new)
        return new


# ---------------------------------------------------------------- what each cloud's resources look like


class Cloud:
    """One provider's resources, as the rows need them. A later cloud subclasses this."""

    name: str
    instance: str
    group: str
    bucket_type: str
    budget_component: str
    action: str
    not_applicable: frozenset[str] = frozenset()
    """Rules with nothing to judge on this provider (a fact of the cloud, said in its guardrail_facts.py): their
    rows do not run on its stacks."""

    def node_group(self, plan: Plan) -> PlannedResource: ...
    def head_group(self, plan: Plan) -> PlannedResource: ...
    def ssh_rule(self, plan: Plan, group: PlannedResource, cidr: str, name: str, *, all_ports=False) -> None: ...
    def eip_on(self, plan: Plan, node: PlannedResource) -> None: ...
    def eip_association_on(self, plan: Plan, node: PlannedResource) -> None: ...
    def ipv6_on_node(self, plan: Plan) -> None: ...
    def metadata_optional(self, plan: Plan) -> None: ...
    def root_disk_plain(self, plan: Plan) -> None: ...
    def bucket_encryption_dropped(self, plan: Plan) -> None: ...
    def bucket_policy(self, plan: Plan, statement: dict) -> None: ...
    def acl_resource(self, plan: Plan, acl: str) -> None: ...
    def block_off(self, plan: Plan) -> None: ...
    def block_dropped(self, plan: Plan) -> None: ...
    def stop_dropped(self, plan: Plan) -> None: ...

    def bucket(self, plan: Plan) -> PlannedResource:
        return plan.one(self.bucket_type)

    def inline_acl(self, plan: Plan, acl: str) -> None:
        plan.set(self.bucket(plan), acl=acl)

    def budget_dropped(self, plan: Plan) -> None:
        plan.drop(lambda r: self.budget_component in r.urn.split("::")[2].split("$")[:-1]
                  or r.type == self.budget_component)

    def hard_stop_off(self, plan: Plan) -> None:
        raise NotImplementedError


class Aws(Cloud):
    name = "aws"
    instance = "aws:ec2/instance:Instance"
    group = "aws:ec2/securityGroup:SecurityGroup"
    bucket_type = "aws:s3/bucket:Bucket"
    budget_component = "goldenenv:aws:StackBudget"
    action = "s3:GetObject"
    template = "aws:ec2/launchTemplate:LaunchTemplate"

    def node_group(self, plan):
        return plan.one(self.group, "-nodes")

    def head_group(self, plan):
        return plan.one(self.group, "-head")

    def ssh_rule(self, plan, group, cidr, name, *, all_ports=False):
        family = "cidrIpv6" if ":" in cidr else "cidrIpv4"
        ports = {"ipProtocol": "-1"} if all_ports else {"ipProtocol": "tcp", "fromPort": 22.0, "toPort": 22.0}
        plan.add("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", name,
                 {**ports, family: cidr, "securityGroupId": group.id})

    def eip_on(self, plan, node):
        plan.add("aws:ec2/eip:Eip", "gpu-eip", {"domain": "vpc", "instance": node.id})

    def eip_association_on(self, plan, node):
        eip = plan.add("aws:ec2/eip:Eip", "loose-eip", {"domain": "vpc"})
        plan.add("aws:ec2/eipAssociation:EipAssociation", "gpu-eip-assoc", {"allocationId": eip.id,
                                                                             "instanceId": node.id})

    def ipv6_on_node(self, plan):
        template = plan.one(self.template)
        interfaces = copy.deepcopy(template.props["networkInterfaces"])
        interfaces[0]["ipv6AddressCount"] = 1.0
        plan.set(template, networkInterfaces=interfaces)

    def ipv6_on_subnet(self, plan):
        plan.set(plan.one("aws:ec2/subnet:Subnet", "-private"), assignIpv6AddressOnCreation=True)

    def metadata_optional(self, plan):
        plan.set(plan.nodes(self.instance)[0], metadataOptions={"httpTokens": "optional"})

    def root_disk_plain(self, plan):
        plan.set(plan.one(self.template), blockDeviceMappings=None)

    def bucket_encryption_dropped(self, plan):
        plan.drop(lambda r: r.type.startswith("aws:s3/bucketServerSideEncryptionConfiguration"))

    def bucket_policy(self, plan, statement):
        plan.add("aws:s3/bucketPolicy:BucketPolicy", "data-policy", {
            "bucket": self.bucket(plan).id, "policy": json.dumps({"Version": "2012-10-17", "Statement": [statement]})})

    def acl_resource(self, plan, acl):
        plan.add("aws:s3/bucketAclV2:BucketAclV2", "data-acl", {"bucket": self.bucket(plan).id, "acl": acl})

    def block_off(self, plan):
        plan.set(plan.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"), blockPublicPolicy=False)

    def block_dropped(self, plan):
        plan.drop(lambda r: r.type == "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")

    def stop_dropped(self, plan):
        plan.drop(lambda r: r.type == "aws:lambda/function:Function" and self.budget_component in r.urn)


class Alicloud(Cloud):
    name = "alicloud"
    instance = "alicloud:ecs/instance:Instance"
    group = "alicloud:ecs/securityGroup:SecurityGroup"
    bucket_type = "alicloud:oss/bucket:Bucket"
    budget_component = "goldenenv:alicloud:BudgetGuard"
    action = "oss:GetObject"

    def node_group(self, plan):
        return plan.one(self.group, "-nodes-sg")

    def head_group(self, plan):
        return plan.one(self.group, "-head-sg")

    def ssh_rule(self, plan, group, cidr, name, *, all_ports=False):
        family = "ipv6CidrIp" if ":" in cidr else "cidrIp"
        ports = ({"ipProtocol": "all", "portRange": "-1/-1"} if all_ports
                 else {"ipProtocol": "tcp", "portRange": "22/22"})
        plan.add("alicloud:ecs/securityGroupRule:SecurityGroupRule", name,
                 {"type": "ingress", **ports, "policy": "accept", "nicType": "intranet", family: cidr,
                  "securityGroupId": group.id})

    def eip_on(self, plan, node):
        self.eip_association_on(plan, node)

    def eip_association_on(self, plan, node):
        eip = plan.add("alicloud:ecs/eipAddress:EipAddress", "gpu-eip", {"paymentType": "PayAsYouGo"})
        plan.add("alicloud:ecs/eipAssociation:EipAssociation", "gpu-eip-assoc",
                 {"allocationId": eip.id, "instanceId": node.id, "instanceType": "EcsInstance"})

    def ipv6_on_node(self, plan):
        plan.set(plan.nodes(self.instance)[0], ipv6AddressCount=1.0)

    def metadata_optional(self, plan):
        plan.set(plan.nodes(self.instance)[0], httpTokens="optional")

    def root_disk_plain(self, plan):
        plan.set(plan.nodes(self.instance)[0], systemDiskEncrypted=False)

    def bucket_encryption_dropped(self, plan):
        plan.drop(lambda r: r.type == "alicloud:oss/bucketServerSideEncryption:BucketServerSideEncryption")

    def bucket_policy(self, plan, statement):
        plan.add("alicloud:oss/bucketPolicy:BucketPolicy", "data-policy", {
            "bucket": self.bucket(plan).props["bucket"],
            "policy": json.dumps({"Version": "1", "Statement": [statement]})})

    def acl_resource(self, plan, acl):
        plan.set(plan.one("alicloud:oss/bucketAcl:BucketAcl"), acl=acl)

    def block_off(self, plan):
        plan.set(plan.one("alicloud:oss/bucketPublicAccessBlock:BucketPublicAccessBlock"), blockPublicAccess=False)

    def block_dropped(self, plan):
        plan.drop(lambda r: r.type == "alicloud:oss/bucketPublicAccessBlock:BucketPublicAccessBlock")

    def stop_dropped(self, plan):
        plan.drop(lambda r: r.type == "alicloud:fc/v3Trigger:V3Trigger" and self.budget_component in r.urn)

    def hard_stop_off(self, plan):
        function = next(r for r in plan.of("alicloud:fc/v3Function:V3Function") if self.budget_component in r.urn)
        plan.set(function, environmentVariables={**function.props["environmentVariables"],
                                                 "GOLDENENV_HARD_STOP": "false"})


class Gcp(Cloud):
    """Google Cloud: a firewall rule on the nodes' network is the group's rule; a public address is an access
    config; a bucket policy Allow to everyone is an IAM grant to allUsers; the public access block is the bucket's
    public access prevention. Compute Engine's metadata server has no tokenless mode and Google encrypts all data
    at rest: the IMDS and encryption rows have nothing to catch here."""

    name = "gcp"
    instance = "gcp:compute/instance:Instance"
    group = "gcp:compute/network:Network"
    bucket_type = "gcp:storage/bucket:Bucket"
    budget_component = "goldenenv:gcp:BudgetStop"
    action = "storage.objects.get"
    not_applicable = frozenset({"imdsv1-allowed", "unencrypted-storage"})
    predefined_acls = {"public-read": "publicRead", "public-read-write": "publicReadWrite",
                       "authenticated-read": "authenticatedRead"}

    def node_group(self, plan):
        return plan.one(self.group, "-sys")

    def head_group(self, plan):
        return plan.one(self.group, "-sys")

    def ssh_rule(self, plan, group, cidr, name, *, all_ports=False):
        allows = [{"protocol": "all"}] if all_ports else [{"protocol": "tcp", "ports": ["22"]}]
        plan.add("gcp:compute/firewall:Firewall", name, {"network": group.id, "direction": "INGRESS",
                                                          "sourceRanges": [cidr], "allows": allows})

    def eip_on(self, plan, node):
        address = plan.add("gcp:compute/address:Address", "gpu-ip", {"addressType": "EXTERNAL"})
        self._access_config(plan, node, {"natIp": address.id})

    def eip_association_on(self, plan, node):
        self._access_config(plan, node, {"networkTier": "PREMIUM"})

    def _access_config(self, plan, node, config):
        interfaces = copy.deepcopy(node.props["networkInterfaces"])
        interfaces[0]["accessConfigs"] = [config]
        plan.set(node, networkInterfaces=interfaces)

    def ipv6_on_node(self, plan):
        node = plan.nodes(self.instance)[0]
        interfaces = copy.deepcopy(node.props["networkInterfaces"])
        interfaces[0]["ipv6AccessConfigs"] = [{"networkTier": "PREMIUM"}]
        plan.set(node, networkInterfaces=interfaces)

    def bucket(self, plan):
        return plan.one(self.bucket_type, "-data-bucket")

    def bucket_policy(self, plan, statement):
        plan.add("gcp:storage/bucketIAMMember:BucketIAMMember", "data-public", {
            "bucket": self.bucket(plan).id, "role": "roles/storage.objectViewer", "member": "allUsers"})

    def acl_resource(self, plan, acl):
        plan.add("gcp:storage/bucketACL:BucketACL", "data-acl", {"bucket": self.bucket(plan).id,
                                                                 "predefinedAcl": self.predefined_acls[acl]})

    def inline_acl(self, plan, acl):
        plan.add("gcp:storage/bucketAccessControl:BucketAccessControl", "data-acl", {
            "bucket": self.bucket(plan).id, "role": "WRITER" if "write" in acl else "READER", "entity": "allUsers"})

    def block_off(self, plan):
        plan.set(self.bucket(plan), publicAccessPrevention="inherited")

    def block_dropped(self, plan):
        plan.set(self.bucket(plan), publicAccessPrevention=None)


class Azure(Cloud):
    """Azure: an NSG rule (inline or a standalone SecurityRule naming the group) is the group's rule; a public
    address is a public IP configuration on the scale set's (or the head NIC's) IP configuration; a bucket is the
    storage account, whose public access block is allowBlobPublicAccess false and whose ACL is a container's
    publicAccess. IMDS answers only `Metadata: true` and Azure encrypts storage and managed disks at rest with no
    switch to turn it off: the IMDS and encryption rows have nothing to catch here. The nodes are scale sets, the
    head a VirtualMachine."""

    name = "azure"
    instance = "azure-native:compute:VirtualMachineScaleSet"
    head_instance = "azure-native:compute:VirtualMachine"
    group = "azure-native:network:NetworkSecurityGroup"
    bucket_type = "azure-native:storage:StorageAccount"
    budget_component = "goldenenv:azure:BudgetStop"
    action = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read"
    not_applicable = frozenset({"imdsv1-allowed", "unencrypted-storage"})

    def node_group(self, plan):
        return plan.one(self.group)

    def head_group(self, plan):
        return plan.one(self.group)

    def ssh_rule(self, plan, group, cidr, name, *, all_ports=False):
        plan.add("azure-native:network:SecurityRule", name, {
            "networkSecurityGroupName": group.props["networkSecurityGroupName"],
            "resourceGroupName": group.props["resourceGroupName"], "direction": "Inbound", "access": "Allow",
            "priority": 200, "protocol": "*" if all_ports else "Tcp", "sourceAddressPrefix": cidr,
            "sourcePortRange": "*", "destinationAddressPrefix": "*", "destinationPortRange": "*" if all_ports else "22"})

    def _ip(self, plan, node, config):
        if node.type == self.head_instance:
            nic = plan.one("azure-native:network:NetworkInterface")
            configs = copy.deepcopy(nic.props["ipConfigurations"])
            configs[0]["publicIPAddress"] = {"id": "pub-id"}
            plan.set(nic, ipConfigurations=configs)
            return
        profile = copy.deepcopy(node.props["virtualMachineProfile"])
        profile["networkProfile"]["networkInterfaceConfigurations"][0]["ipConfigurations"].append(config)
        plan.set(node, virtualMachineProfile=profile)

    def eip_on(self, plan, node):
        plan.add("azure-native:network:PublicIPAddress", "gpu-ip", {"sku": {"name": "Standard"}})

    def eip_association_on(self, plan, node):
        self._ip(plan, node, {"name": "pub", "publicIPAddressConfiguration": {"name": "pub"}})

    def ipv6_on_node(self, plan):
        self._ip(plan, plan.nodes(self.instance)[0], {
            "name": "v6", "privateIPAddressVersion": "IPv6",
            "publicIPAddressConfiguration": {"name": "pub6", "publicIPAddressVersion": "IPv6"}})

    def bucket(self, plan):
        return plan.one(self.bucket_type, "-data-account")

    def _container(self, plan, access):
        plan.add("azure-native:storage:BlobContainer", "public", {
            "accountName": self.bucket(plan).props["accountName"], "publicAccess": access})

    def bucket_policy(self, plan, statement):
        self._container(plan, "Container")

    def acl_resource(self, plan, acl):
        self._container(plan, "Container" if "write" in acl else "Blob")

    def inline_acl(self, plan, acl):
        plan.set(self.bucket(plan), allowBlobPublicAccess=True)

    def block_off(self, plan):
        plan.set(self.bucket(plan), allowBlobPublicAccess=True)

    def block_dropped(self, plan):
        plan.set(self.bucket(plan), allowBlobPublicAccess=None)

    def stop_dropped(self, plan):
        plan.drop(lambda r: r.type == "azure-native:web:WebApp")


class Tencent(Cloud):
    """Tencent Cloud: a security group's rules are a rule set; a public address is an EIP association; the bucket's
    own ACL is its public access block (COS has no block resource); a root disk is judged through a data disk
    (the provider takes `encrypt` on data disks only). CVM's metadata service has no token mode: nothing to catch."""

    name = "tencent"
    instance = "tencentcloud:Instance/instance:Instance"
    group = "tencentcloud:Security/group:Group"
    bucket_type = "tencentcloud:Cos/bucket:Bucket"
    budget_component = "goldenenv:tencent:BudgetGuard"
    action = "name/cos:GetObject"
    not_applicable = frozenset({"imdsv1-allowed"})

    def node_group(self, plan):
        return plan.one(self.group, "-nodes-sg")

    def head_group(self, plan):
        return plan.one(self.group, "-head-sg")

    def ssh_rule(self, plan, group, cidr, name, *, all_ports=False):
        family = "ipv6CidrBlock" if ":" in cidr else "cidrBlock"
        ports = {"protocol": "ALL", "port": "ALL"} if all_ports else {"protocol": "TCP", "port": "22"}
        plan.add("tencentcloud:Security/groupRuleSet:GroupRuleSet", name, {
            "securityGroupId": group.id, "ingresses": [{"action": "ACCEPT", **ports, family: cidr}]})

    def eip_on(self, plan, node):
        self.eip_association_on(plan, node)

    def eip_association_on(self, plan, node):
        eip = plan.add("tencentcloud:Eip/instance:Instance", "gpu-eip", {})
        plan.add("tencentcloud:Eip/association:Association", "gpu-eip-assoc", {"eipId": eip.id,
                                                                                "instanceId": node.id})

    def ipv6_on_node(self, plan):
        plan.set(plan.nodes(self.instance)[0], ipv6AddressCount=1.0)

    def root_disk_plain(self, plan):
        plan.set(plan.nodes(self.instance)[0], dataDisks=[{"dataDiskType": "CLOUD_BSSD", "dataDiskSize": 100.0,
                                                           "encrypt": False}])

    def bucket_encryption_dropped(self, plan):
        plan.set(self.bucket(plan), encryptionAlgorithm=None)

    def bucket_policy(self, plan, statement):
        plan.add("tencentcloud:Cos/bucketPolicy:BucketPolicy", "data-policy", {
            "bucket": self.bucket(plan).props["bucket"],
            "policy": json.dumps({"version": "2.0", "Statement": [statement]})})

    def acl_resource(self, plan, acl):
        plan.set(self.bucket(plan), acl=acl)

    def block_off(self, plan):
        plan.set(self.bucket(plan), acl="public-read")

    def block_dropped(self, plan):
        plan.set(self.bucket(plan), acl=None)

    def stop_dropped(self, plan):
        plan.drop(lambda r: r.type == "tencentcloud:Scf/function:Function" and self.budget_component in r.urn)


class Huawei(Cloud):
    """Huawei Cloud: a security group's rules are SecgroupRule resources; a public address is an ECS instance's own
    EIP (eip_type + bandwidth) or an EIP associated with its port; OBS has no public access block resource, so the
    bucket's own ACL is its block; a disk is judged through a data disk's DEW key (the system disk's is not judged:
    guardrail_facts). ECS's metadata token switch is no provider input: nothing to catch."""

    name = "huawei"
    instance = ("huaweicloud:Ecs/instance:Instance", "pulumi-python:dynamic/huawei:DevServer")
    """ECS nodes and the head, and the Ascend pools' ModelArts Lite Servers (a dynamic resource of its own type)."""
    group = "huaweicloud:Vpc/secgroup:Secgroup"
    bucket_type = "huaweicloud:Obs/bucket:Bucket"
    budget_component = "goldenenv:huawei:BudgetGuard"
    action = "GetObject"
    not_applicable = frozenset({"imdsv1-allowed"})

    def node_group(self, plan):
        return plan.one(self.group, "-nodes-sg")

    def head_group(self, plan):
        return plan.one(self.group, "-head-sg")

    def ssh_rule(self, plan, group, cidr, name, *, all_ports=False):
        ports = {} if all_ports else {"protocol": "tcp", "ports": "22"}
        plan.add("huaweicloud:Vpc/secgroupRule:SecgroupRule", name, {
            "direction": "ingress", "ethertype": "IPv6" if ":" in cidr else "IPv4", "securityGroupId": group.id,
            "remoteIpPrefix": cidr, "action": "allow", **ports})

    def eip_on(self, plan, node):
        plan.set(node, eipType="5_bgp", bandwidth={"shareType": "PER", "size": 10, "chargeMode": "traffic"})

    def eip_association_on(self, plan, node):
        """An EIP bound to the node's port (the plan knows no port ids: the port stands here as the node's id)."""
        eip = plan.add("huaweicloud:Vpc/eip:Eip", "gpu-eip", {"publicip": {"type": "5_bgp"}})
        plan.add("huaweicloud:Vpc/eipAssociate:EipAssociate", "gpu-eip-assoc", {"publicIp": eip.id, "portId": node.id})

    def ipv6_on_node(self, plan):
        node = plan.nodes(self.instance)[0]
        if "networks" not in node.props:  # a Lite Server: CreateDevServer's ServerNetwork ipv6_enable
            plan.set(node, ipv6Enable=True)
            return
        plan.set(node, networks=[{**n, "ipv6Enable": True} for n in node.props["networks"]])

    def root_disk_plain(self, plan):
        plan.set(plan.nodes(self.instance)[0], dataDisks=[{"type": "GPSSD", "size": 100}])

    def bucket_encryption_dropped(self, plan):
        plan.set(self.bucket(plan), encryption=False, sseAlgorithm=None)

    def bucket_policy(self, plan, statement):
        plan.add("huaweicloud:Obs/bucketPolicy:BucketPolicy", "data-policy", {
            "bucket": self.bucket(plan).props["bucket"], "policyFormat": "obs",
            "policy": json.dumps({"Statement": [statement]})})

    def acl_resource(self, plan, acl):
        plan.set(self.bucket(plan), acl=acl)

    def block_off(self, plan):
        plan.set(self.bucket(plan), acl="public-read")

    def block_dropped(self, plan):
        plan.set(self.bucket(plan), acl=None)

    def stop_dropped(self, plan):
        plan.drop(lambda r: r.type == "huaweicloud:FunctionGraph/trigger:Trigger" and self.budget_component in r.urn)

    def hard_stop_off(self, plan):
        function = next(r for r in plan.of("huaweicloud:FunctionGraph/function:Function")
                        if self.budget_component in r.urn)
        plan.set(function, userData=json.dumps({**json.loads(function.props["userData"]),
                                                "GOLDENENV_HARD_STOP": "false"}))


CLOUDS: dict[str, Cloud] = {"aws": Aws(), "alicloud": Alicloud(), "gcp": Gcp(), "azure": Azure(),
                           "tencent": Tencent(), "huawei": Huawei()}
ALL = tuple(CLOUDS)


# ---------------------------------------------------------------- the table

SSH = "ssh-open-to-world"
PUBLIC_IP = "public-ip-on-gpu-node"
IMDS = "imdsv1-allowed"
ENCRYPTION = "unencrypted-storage"
BUCKET = "s3-public-access"
BUDGET = "budget-not-planned"


@dataclass(frozen=True)
class Row:
    id: str
    clouds: tuple[str, ...]
    mutate: Callable[[Plan, Cloud], None]
    rule: str
    when: Callable[[dict[str, Any]], bool] = lambda config: True
    """Which stacks of those clouds the mutation applies to (by their stack file)."""


def ssh_from(*cidrs: str, group: str = "node", all_ports: bool = False) -> Callable[[Plan, Cloud], None]:
    def mutate(plan: Plan, cloud: Cloud) -> None:
        target = cloud.node_group(plan) if group == "node" else cloud.head_group(plan)
        for i, cidr in enumerate(cidrs):
            cloud.ssh_rule(plan, target, cidr, f"admin-{i}", all_ports=all_ports)
    return mutate


def ssh_split(*cidrs: str) -> Callable[[Plan, Cloud], None]:
    """Each group alone is narrow enough; the nodes' and the head's groups together are not."""
    def mutate(plan: Plan, cloud: Cloud) -> None:
        groups = [cloud.node_group(plan), cloud.head_group(plan)]
        for i, cidr in enumerate(cidrs):
            cloud.ssh_rule(plan, groups[i % 2], cidr, f"admin-{i}")
    return mutate


def policy(statement: dict) -> Callable[[Plan, Cloud], None]:
    def mutate(plan: Plan, cloud: Cloud) -> None:
        cloud.bucket_policy(plan, {"Sid": "Mutation", "Effect": "Allow", "Action": cloud.action, "Resource": "*",
                                   **statement})
    return mutate


def node(action: str) -> Callable[[Plan, Cloud], None]:
    def mutate(plan: Plan, cloud: Cloud) -> None:
        getattr(cloud, action)(plan, plan.nodes(cloud.instance)[0])
    return mutate


def call(action: str, *args: Any) -> Callable[[Plan, Cloud], None]:
    return lambda plan, cloud: getattr(cloud, action)(plan, *args)


def both(*mutations: Callable[[Plan, Cloud], None]) -> Callable[[Plan, Cloud], None]:
    def mutate(plan: Plan, cloud: Cloud) -> None:
        for m in mutations:
            m(plan, cloud)
    return mutate


ALTERNATING_50 = [f"{2 * i + 1}.0.0.0/8" for i in range(50)]           # 1/8, 3/8 ... 99/8: ~20 % of IPv4
ALTERNATING_128 = [f"{2 * i}.0.0.0/8" for i in range(128)]             # 0/8, 2/8 ... 254/8: ~50 % (less private)
IPV6_32S = [f"2a0{i}:1000::/32" for i in range(8)]

TABLE: tuple[Row, ...] = (
    # the probe's cases (project issue 22), AWS
    Row("ssh-short-0/0", ("aws",), ssh_from("0/0"), SSH),
    Row("ssh-50-alternating-/8s", ("aws",), ssh_from(*ALTERNATING_50), SSH),
    Row("ssh-128-alternating-/8s", ("aws",), ssh_from(*ALTERNATING_128), SSH),
    Row("ssh-8-ipv6-/32s", ("aws",), ssh_from(*IPV6_32S), SSH),
    Row("eip-on-gpu-instance", ("aws",), node("eip_on"), PUBLIC_IP),
    Row("eip-association-on-gpu-instance", ("aws",), node("eip_association_on"), PUBLIC_IP),
    Row("ipv6-address-count-on-node", ("aws",), call("ipv6_on_node"), PUBLIC_IP),
    Row("ipv6-assigned-on-node-subnet", ("aws",), call("ipv6_on_subnet"), PUBLIC_IP),
    Row("instance-metadata-optional-over-template", ("aws",), call("metadata_optional"), IMDS),
    Row("template-without-block-device-mappings", ("aws",), call("root_disk_plain"), ENCRYPTION),
    Row("policy-notprincipal-allow", ("aws",), policy({"NotPrincipal": {"AWS": "arn:aws:iam::000000000000:root"}}),
        BUCKET),
    Row("policy-canonicaluser-star", ("aws",), policy({"Principal": {"CanonicalUser": "*"}}), BUCKET),
    Row("public-access-block-removed", ("aws",), call("block_dropped"), BUCKET),
    Row("public-access-block-removed-with-public-read-acl", ("aws",),
        both(call("block_dropped"), call("acl_resource", "public-read")), BUCKET),
    Row("inline-public-read-write-acl", ("aws",), call("inline_acl", "public-read-write"), BUCKET),
    Row("budget-removed", ("aws",), call("budget_dropped"), BUDGET),
    # the probe's cases, Alibaba Cloud
    Row("eip-association-on-gpu-node", ("alicloud",), node("eip_association_on"), PUBLIC_IP),
    Row("http-tokens-optional", ("alicloud",), call("metadata_optional"), IMDS),
    Row("system-disk-encrypted-false", ("alicloud",), call("root_disk_plain"), ENCRYPTION),
    Row("oss-sse-removed", ("alicloud",), call("bucket_encryption_dropped"), ENCRYPTION),
    Row("oss-acl-public-read", ("alicloud",), call("acl_resource", "public-read"), BUCKET),
    Row("oss-public-access-block-off", ("alicloud",), call("block_off"), BUCKET),
    Row("oss-policy-principal-star", ("alicloud",), policy({"Principal": ["*"]}), BUCKET),
    # every probe case on every cloud that has the resource
    Row("x-ssh-short-0/0", ALL, ssh_from("0/0"), SSH),
    Row("x-ssh-50-alternating-/8s", ALL, ssh_from(*ALTERNATING_50), SSH),
    Row("x-ssh-128-alternating-/8s", ALL, ssh_from(*ALTERNATING_128), SSH),
    Row("x-ssh-8-ipv6-/32s", ALL, ssh_from(*IPV6_32S), SSH),
    Row("x-eip-on-gpu-node", ALL, node("eip_on"), PUBLIC_IP),
    Row("x-ipv6-address-count-on-node", ALL, call("ipv6_on_node"), PUBLIC_IP),
    Row("x-metadata-optional", ALL, call("metadata_optional"), IMDS),
    Row("x-root-disk-unencrypted", ALL, call("root_disk_plain"), ENCRYPTION),
    Row("x-bucket-encryption-removed", ALL, call("bucket_encryption_dropped"), ENCRYPTION),
    Row("x-policy-notprincipal-allow", ALL, policy({"NotPrincipal": {"AWS": "arn:aws:iam::000000000000:root"}}),
        BUCKET),
    Row("x-policy-canonicaluser-star", ALL, policy({"Principal": {"CanonicalUser": "*"}}), BUCKET),
    Row("x-policy-principal-star", ALL, policy({"Principal": "*"}), BUCKET),
    Row("tencent-policy-anyone", ("tencent",), policy({"Principal": {"qcs": ["qcs::cam::anyone:anyone"]}}), BUCKET),
    Row("x-acl-public-read", ALL, call("acl_resource", "public-read"), BUCKET),
    Row("x-inline-public-read-write-acl", ALL, call("inline_acl", "public-read-write"), BUCKET),
    Row("x-public-access-block-off", ALL, call("block_off"), BUCKET),
    Row("x-public-access-block-removed", ALL, call("block_dropped"), BUCKET),
    Row("x-budget-removed", ALL, call("budget_dropped"), BUDGET),
    # our own
    Row("ssh-short-class-a-pair", ALL, ssh_from("2/8", "4/8"), SSH),
    Row("ssh-three-/9s-apart", ALL, ssh_from("11.0.0.0/9", "13.0.0.0/9", "15.0.0.0/9"), SSH),
    Row("ssh-all-ports-from-two-/8s", ALL, ssh_from("11.0.0.0/8", "13.0.0.0/8", all_ports=True), SSH),
    Row("ssh-unreadable-source", ALL, ssh_from("anywhere"), SSH),
    Row("ssh-split-across-node-and-head-groups", ALL, ssh_split("11.0.0.0/8", "13.0.0.0/8"), SSH),
    Row("eip-association-on-head", ALL,
        lambda plan, cloud: cloud.eip_association_on(plan, next(
            r for r in plan.of(getattr(cloud, "head_instance", cloud.instance)) if "SlurmHead" in r.urn)), PUBLIC_IP),
    Row("policy-aws-star-in-list", ALL, policy({"Principal": {"AWS": ["arn:aws:iam::000000000000:root", "*"]}}),
        BUCKET),
    Row("policy-star-with-source-ip-condition", ALL,
        policy({"Principal": "*", "Condition": {"IpAddress": {"aws:SourceIp": "0.0.0.0/0"}}}), BUCKET),
    Row("policy-star-with-ifexists-account", ALL,
        policy({"Principal": "*",
                "Condition": {"StringEqualsIfExists": {"aws:PrincipalAccount": "000000000000"}}}), BUCKET),
    Row("policy-star-account-wildcard", ALL,
        policy({"Principal": "*", "Condition": {"StringLike": {"aws:PrincipalAccount": "*"}}}), BUCKET),
    Row("acl-authenticated-read", ALL, call("acl_resource", "authenticated-read"), BUCKET),
    Row("acl-public-read-write", ALL, call("acl_resource", "public-read-write"), BUCKET),
    Row("aws-acl-grant-to-all-users", ("aws",), lambda plan, cloud: plan.add(
        "aws:s3/bucketAclV2:BucketAclV2", "grant-acl", {"bucket": cloud.bucket(plan).id, "accessControlPolicy": {
            "grants": [{"grantee": {"type": "Group", "uri": "http://acs.amazonaws.com/groups/global/AllUsers"},
                        "permission": "READ"}], "owner": {"id": "x"}}}), BUCKET),
    Row("aws-instance-ipv6-addresses", ("aws",),
        lambda plan, cloud: plan.set(plan.nodes(cloud.instance)[0], ipv6Addresses=["2600:1f18::10"]), PUBLIC_IP),
    Row("aws-head-root-block-device-removed", ("aws",),
        lambda plan, cloud: plan.set(next(r for r in plan.of(cloud.instance) if "SlurmHead" in r.urn),
                                     rootBlockDevice=None), ENCRYPTION),
    Row("aws-template-maps-only-an-unencrypted-data-disk", ("aws",), lambda plan, cloud: plan.set(
        plan.one(cloud.template), blockDeviceMappings=[{"deviceName": "/dev/sdf", "noDevice": "true"}]), ENCRYPTION),
    Row("ssh-short-two-octets-world", ALL, ssh_from("0.0/0"), SSH),
    Row("ssh-on-the-head-group-from-two-/8s", ALL, ssh_from("11.0.0.0/8", "13.0.0.0/8", group="head"), SSH),
    Row("aws-instance-metadata-endpoint-only", ("aws",),
        lambda plan, cloud: plan.set(plan.nodes(cloud.instance)[0], metadataOptions={"httpEndpoint": "enabled",
                                                                                     "httpTokens": "optional"}),
        IMDS),
    Row("aws-hard-stop-function-removed", ("aws",), call("stop_dropped"), BUDGET, when=_hard_stop),
    Row("alicloud-head-http-tokens-unset", ("alicloud",), lambda plan, cloud: plan.set(
        next(r for r in plan.of(cloud.instance) if "SlurmHead" in r.urn), httpTokens=None, httpEndpoint=None),
        IMDS),
    Row("alicloud-system-disk-encryption-unset", ("alicloud",),
        lambda plan, cloud: plan.set(plan.nodes(cloud.instance)[0], systemDiskEncrypted=None), ENCRYPTION),
    Row("alicloud-budget-guard-never-runs", ("alicloud",), call("stop_dropped"), BUDGET),
    Row("azure-deallocating-function-removed", ("azure",), call("stop_dropped"), BUDGET, when=_hard_stop),
    Row("alicloud-hard-stop-switched-off", ("alicloud",), call("hard_stop_off"), BUDGET, when=_hard_stop),
    Row("alicloud-inline-bucket-policy-star", ("alicloud",), lambda plan, cloud: plan.set(
        cloud.bucket(plan), policy=json.dumps({"Version": "1", "Statement": [
            {"Effect": "Allow", "Principal": ["*"], "Action": ["oss:GetObject"], "Resource": ["acs:oss:*:*:b/*"]}]})),
        BUCKET),
)


def _cases() -> list[Any]:
    cases = []
    for row in TABLE:
        for stack, config in CONFIGS.items():
            cloud = config.get("goldenenv:cloud")
            if cloud in row.clouds and row.when(config) and row.rule not in CLOUDS[cloud].not_applicable:
                cases.append(pytest.param(row, stack, id=f"{row.id}-{stack}"))
    return cases


# ---------------------------------------------------------------- the runs

@pytest.fixture(scope="module")
def planned():
    """stack -> (its plan, the guardrails' findings on it as planned): shipped.planned, once for the whole run."""
    return shipped.planned


CLOUD_STACKS = [s for s, c in CONFIGS.items() if c.get("goldenenv:cloud") in CLOUDS]


def test_every_cloud_has_an_adapter_and_stacks():
    assert {c.get("goldenenv:cloud") for c in CONFIGS.values()} - {"local"} <= set(CLOUDS)
    for cloud in CLOUDS:
        assert any(c.get("goldenenv:cloud") == cloud for c in CONFIGS.values()), cloud


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_shipped_stack_passes_every_rule(planned, stack):
    _, found = planned(stack)
    errors = [f for f in found if f.severity is Severity.ERROR]
    assert errors == [], errors


@pytest.mark.parametrize("row,stack", _cases())
def test_mutation_is_caught(planned, row, stack):
    plan, found = planned(stack)
    if "head" in row.id and not any("SlurmHead" in r.urn for r in plan.resources):
        pytest.skip(f"{stack} plans no Slurm head (goldenenv:scheduler none): no head to expose")
    copy_ = Plan(stack, plan.resources)
    row.mutate(copy_, CLOUDS[CONFIGS[stack]["goldenenv:cloud"]])
    before = [f for f in found if f.rule == row.rule]
    after = [f for f in shipped.guardrail_findings(plan, copy_.resources) if f.rule == row.rule]
    assert before == [] and after, f"{row.id} on {stack}: {row.rule} did not fire"
    assert all(f.severity is Severity.ERROR for f in after)


def test_table_covers_each_cloud_alike():
    """Every cloud runs the cross-cloud rows: the same table, not a list per cloud."""
    for name, cloud in CLOUDS.items():
        rows = [r for r in TABLE if name in r.clouds]
        assert sum(r.id.startswith("x-") for r in rows) == sum(r.id.startswith("x-") for r in TABLE)
        assert cloud.not_applicable <= {"imdsv1-allowed", "unencrypted-storage", "unencrypted-topic"}, name
