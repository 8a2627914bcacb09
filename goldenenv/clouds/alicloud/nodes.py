"""A pool of identical GPU nodes on Alibaba Cloud: placement, RAM role, instances with their ERIs.

Placement comes from the catalog (node_layout.csv): a LowLatency deployment set for the families Alibaba places
that way (at most 20 nodes, one zone), an E-HPC cluster for SCC types, nothing else for the rest. eRDMA needs no
HPC cluster. Each node is pay-as-you-go (PostPaid), optionally spot at the pay-as-you-go ceiling, released when
Alibaba reclaims it; its disks are encrypted and its metadata needs tokens.

A time to live (lifecycle.ttlHours) is Alibaba's own: the instance's auto_release_time, fixed when the node is
created (the node ignores later changes to it, so each `up` does not push the release back). Alibaba releases,
that is deletes, the node then, with its system disk.

Update semantics, explicit as on AWS. A node carries its boot script (user data, which names the golden image by
digest) itself. The provider would write a new one in place by stopping and starting the node, and cloud-init
would not run it there (it runs once per instance): every image push would restart every node mid-run for nothing.
So a node ignores changes to its user data and keeps the script it booted, until the user rolls it
(`goldenenv up --roll-nodes`, or GOLDENENV_ROLL_NODES): a rolled node replaces on a new script, and the new node
runs it. The pool records the script it would give each node now (its `boot_scripts` output), so `goldenenv
plan` and `up --roll-nodes` see which nodes are behind from the last deployment alone. Changes the user asks
of the node itself (type, vSwitch, host image, zone ...) are not held: plan says what they do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import PurePosixPath
from typing import Any

import pulumi
import pulumi_alicloud as alicloud
import yaml

from goldenenv import sshkeys
from goldenenv.clouds import access
from goldenenv.clouds.alicloud import privilege
from goldenenv.clouds.alicloud.erdma import HIGH_PERFORMANCE, eri_layout
from goldenenv.clouds.alicloud.guardrail_facts import INSTANCE
from goldenenv.clouds.base import NodeScript, NodeUpdates, script_digest
from goldenenv.spec import ClusterSpec, Problem

POST_PAID = "PostPaid"
SPOT_STRATEGY = "SpotAsPriceGo"
"""Spot at the market price, never above the pay-as-you-go price."""
SPOT_INTERRUPTION = "Terminate"
"""A reclaimed spot node is released (Alibaba's default): its system disk goes with it."""
LOW_LATENCY = "LowLatency"
SYSTEM_DISK = "cloud_essd"
HTTP_TOKENS = "required"
ECS_PRINCIPAL = "ecs.aliyuncs.com"
RAM_NAME_MAX = 64
AUTO_RELEASE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""ISO 8601 in UTC, yyyy-MM-ddTHH:mm:ssZ (pulumi-alicloud ecs.Instance auto_release_time)."""
AUTO_RELEASE_INPUT = "autoReleaseTime"
USER_DATA_INPUT = "userData"
NODE_POOL = "goldenenv:alicloud:GpuNodePool"
BOOT_SCRIPTS_OUTPUT = "boot_scripts"
"""GpuNodePool's output: node resource name -> script_digest of the user data the program gives it now."""
GOLDEN_IMAGE_SCRIPT = "golden-image.sh"
"""The boot file naming the golden image (templates/node/golden-image.sh.j2: `image=<ref>`)."""
MUNGE_READ_ACTIONS = privilege.NODE_SECRET_ACTIONS
"""What a node may do with the stack's munge key secret: the least-privilege table's (alicloud/privilege.py)."""
SSH_KEY_TYPES = (sshkeys.RSA, *sshkeys.ECDSA_CURVES)
"""What ECS imports: rsa, dsa, ssh-rsa, ssh-dss and ecdsa keys (ECS API reference 2014-05-26, ImportKeyPair), less
DSA, which goldenenv does not take; no ED25519."""

# How an `up` changes a running node, from terraform-provider-alicloud, which pulumi-alicloud bridges:
# alicloud/resource_alicloud_instance.go (aliyun/terraform-provider-alicloud at 4c76bef5, provider 1.289).
# ForceNew in its schema: the inputs below; the nested `network_interfaces` and `data_disks` are ForceNew as a
# whole (pulumi-alicloud 4.0.0 ecs/instance.py: "immutable after resource creation"). Everything else is
# updated in place; these in place changes stop and start the instance (resourceAliyunInstanceUpdate stops it
# when modifyInstanceImage, modifyVpcAttribute, modifyInstanceAttribute (reboot), modifyInstanceType or
# modifyInstanceAttributeNeedStopped have work, then starts it): user_data ("From version 1.60.0, it can be
# updated in-place. If updated, the instance will reboot"), image_id (ReplaceSystemDisk: a new system disk from
# the image; only the provider setting features.ecs_instance.replace_on_image_update, which goldenenv leaves
# unset, makes it ForceNew through the resource's CustomizeDiff), instance_type, vswitch_id / private_ip ("changed
# in the same availability zone"), host_name, password, key_name, cpu_options. Tags, security groups, the deployment
# set, jumbo frames, metadata options and the system disk's size change without a restart.
REPLACING_INPUTS = frozenset({
    "availabilityZone", "networkInterfaceId", "networkInterfaceTrafficMode", "networkCardIndex", "queuePairNumber",
    "sourceDestCheck", "networkInterfaces", "dataDisks", "imageOptions", "systemDiskCategory", "systemDiskEncrypted",
    "systemDiskKmsKeyId", "systemDiskEncryptAlgorithm", "systemDiskStorageClusterId", "spotStrategy",
    "spotPriceLimit", "spotInterruptionBehavior", "securityEnhancementStrategy", "hpcClusterId",
    "httpPutResponseHopLimit", "ipv6AddressCount", "dedicatedHostId", "launchTemplateId", "launchTemplateName",
    "launchTemplateVersion",
})
_RESTART = "Alibaba stops the node and starts it again for the change (its running jobs end)"
RESTARTING_INPUTS = {
    # goldenenv's boot script is cloud-init write_files and runcmd, which run once per instance (templates/node/
    # cloud-config.yaml.j2): a restarted node keeps what its first boot set up
    # GpuNodePool therefore ignores user data changes unless the node is rolled, which replaces it
    "userData": "Alibaba stops the node, writes the new user data and starts it again (its running jobs end); "
                "cloud-init runs the boot script once per instance, so the node does not run the new one: only a "
                "new node does (`goldenenv up --roll-nodes`, which erases its system disk)",
    "imageId": "Alibaba stops the node, replaces its system disk with a new one from the new image (erasing the "
               "disk; the node keeps its ID and private IP) and starts it again (its running jobs end)",
    "instanceType": "Alibaba stops the node, changes its type and starts it again (its running jobs end)",
    "vswitchId": "Alibaba stops the node, moves it to the new vSwitch (within its zone only) and starts it again "
                 "(its running jobs end)",
    "privateIp": "Alibaba stops the node, gives it the new private IP and starts it again (its running jobs end)",
    "hostName": _RESTART,
    "password": _RESTART,
    "keyName": _RESTART,
    "cpuOptions": _RESTART,
}


def boot_script_news(before: Any, now: Any) -> str:
    """What differs between two nodes' user data (base64 cloud-config, as GpuNodePool gives it): the golden image
    they pull, and which boot files changed otherwise; "" when either cannot be read."""
    old, new = _boot_files(before), _boot_files(now)
    if old is None or new is None:
        return ""
    parts = []
    was, will = _golden_image(old), _golden_image(new)
    if was != will:
        if was and will:
            same_repo = was.split("@")[0] == will.split("@")[0]
            parts.append(f"the golden image moved from {_short_ref(was, same_repo)} to {_short_ref(will, same_repo)}")
        else:
            parts.append(f"the golden image is now {_short_ref(will)} (none before)" if will
                         else f"no golden image any more (was {_short_ref(was)})")
    files = sorted(p for p in old.keys() | new.keys() if _without_image(old.get(p)) != _without_image(new.get(p)))
    if files:
        parts.append("changed " + ", ".join(PurePosixPath(p).name for p in files))
    return "; ".join(parts)


def _boot_files(user_data: Any) -> dict[str, str] | None:
    """The files a cloud-config user data writes: path -> content; None when it is not one (or encrypted)."""
    if not isinstance(user_data, str):
        return None
    try:
        config = yaml.safe_load(base64.b64decode(user_data, validate=True).decode())
    except (ValueError, yaml.YAMLError):
        return None
    if not isinstance(config, dict):
        return None
    return {str(f.get("path")): str(f.get("content") or "") for f in config.get("write_files") or []
            if isinstance(f, dict)}


def _golden_image(files: dict[str, str]) -> str | None:
    for path, content in files.items():
        if PurePosixPath(path).name == GOLDEN_IMAGE_SCRIPT:
            found = re.search(r"^image=(.+)$", content, re.M)
            if found:
                words = shlex.split(found.group(1))
                return words[0] if words else None
    return None


def _without_image(content: str | None) -> str | None:
    return None if content is None else re.sub(r"^image=.*$", "image=", content, flags=re.M)


def _short_ref(ref: str | None, digest_only: bool = False) -> str:
    """repository@sha256:<12 hex>, or sha256:<12 hex> alone."""
    if not ref:
        return "none"
    repo, _, digest = ref.partition("@")
    short = digest[:len("sha256:") + 12] if digest.startswith("sha256:") else digest
    return short if digest_only and short else f"{repo}@{short}" if short else repo


NODE_UPDATES = NodeUpdates(
    node_types=(INSTANCE,),
    script=NodeScript(input=USER_DATA_INPUT, wanted_type=NODE_POOL, wanted_output=BOOT_SCRIPTS_OUTPUT,
                      news=boot_script_news),
    replacing=REPLACING_INPUTS,
    restarting=RESTARTING_INPUTS,
    meaning={"userData": "userData (boot script)", "imageId": "imageId (host image)",
             "availabilityZone": "availabilityZone (zone)", "networkInterfaces": "networkInterfaces (secondary ERI)",
             "queuePairNumber": "queuePairNumber (ERI queue pairs)"},
    erased="its system disk",
    note="nodes pin no launch template, each carries its boot script and host image itself: a later boot script "
         "(a new golden image push included) reaches running nodes only with `goldenenv up --roll-nodes`, which "
         "replaces them (erasing their system disks); a new host image replaces their system disks in place and a "
         "new instance type or vSwitch is applied by restarting them; a new zone, eRDMA layout, system disk "
         "category or spot setting replaces the nodes (erasing their system disks)",
)
"""How GpuNodePool's nodes take a change: no template; the boot script is held until rolled, every other change
is applied to the instance itself."""


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    instance_type: str
    count: int
    image_id: pulumi.Input[str]
    """A pinned public image ID or the stack's own: never a floating alias."""
    zone: pulumi.Input[str]
    vswitch_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    resource_group_id: pulumi.Input[str]
    placement: str
    """low-latency-set | hpc-cluster | none (catalog node_layout.csv)"""
    network_cards: int
    eri_count: int
    """0 for a pool without eRDMA."""
    queue_pairs: int
    jumbo_frames: bool
    capacity: str
    """on-demand | spot"""
    system_disk_gib: int
    user_data: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    """acs:oss:*:*:<bucket>: the only bucket the nodes' role reaches."""
    mount_actions: tuple[str, ...] = ()
    """Read-only NAS actions the shared file system's mount script calls at boot (storage.NODE_MOUNT_ACTIONS)."""
    role_name: str
    tags: dict[str, str]
    auto_release_time: str | None = None
    """When Alibaba releases (deletes) each node (auto_release_time, PostPaid only); None: never."""
    rolled: frozenset[int] = frozenset()
    """Indexes of the nodes to replace onto the current boot script (the user asked to roll them)."""
    ssh_key: access.NodeKey | None = None
    """The key pair the nodes take for ssh logins (the instance's key_name); None: none, Cloud Assistant only."""
    munge_secret: str | None = None
    """The stack's munge key secret (acs:kms:...), which the nodes may read; None: no scheduler."""


class GpuNodePool(pulumi.ComponentResource):
    """The pool's placement, its RAM role, and its nodes, each with the role attached.

    A node ignores changes to its user data (ignore_changes), so a new boot script (a golden image push) neither
    restarts nor replaces it. Pulumi's ignoreChanges keeps the state's value for replacements too, so a rolled
    node drops the ignore and replaces on a user data change instead (replace_on_changes): the new node boots the
    new script. Nodes are deleted before their replacement is created (the deployment set and the stack's ERI
    and quota limits do not take a double). `boot_scripts` records the script each node would get now.
    """

    instance_ids: pulumi.Output[list[str]]
    private_ips: pulumi.Output[list[str]]
    deployment_set: pulumi.Output[str] | None
    boot_scripts: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(NODE_POOL, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        placement: dict[str, pulumi.Input[str]] = {}
        deployment_set = None
        if args.placement == "low-latency-set":
            deployment_set = alicloud.ecs.EcsDeploymentSet(
                f"{name}-set", deployment_set_name=f"{name}", strategy=LOW_LATENCY,
                description=f"goldenenv {name}: {args.count} x {args.instance_type}, low latency", opts=child,
            )
            placement["deployment_set_id"] = deployment_set.id
        elif args.placement == "hpc-cluster":
            cluster = alicloud.ecs.HpcCluster(
                f"{name}-hpc", name=f"{name}", description=f"goldenenv {name}: {args.instance_type}", opts=child,
            )
            placement["hpc_cluster_id"] = cluster.id

        role = self._role(name, args, child)
        key_pair = None
        if args.ssh_key:
            key_pair = alicloud.ecs.EcsKeyPair(
                f"{name}-key", key_pair_name=args.ssh_key.name, public_key=args.ssh_key.public_key,
                resource_group_id=args.resource_group_id, tags=args.tags, opts=child,
            )
        slots = eri_layout(args.network_cards, args.eri_count, args.queue_pairs)
        primary = [s for s in slots if s.primary]
        secondary = [s for s in slots if not s.primary]
        user_data = pulumi.Output.from_input(args.user_data).apply(lambda text: base64.b64encode(text.encode()).decode())
        nodes = []
        for i in range(args.count):
            node = alicloud.ecs.Instance(
                f"{name}-{i}",
                instance_name=f"{name}-{i}",
                **private_instance(args),
                **_market(args.capacity),
                enable_jumbo_frame=args.jumbo_frames if args.eri_count else None,
                **({"network_interface_traffic_mode": HIGH_PERFORMANCE,
                    "network_card_index": primary[0].network_card_index,
                    "queue_pair_number": primary[0].queue_pairs} if primary else {}),
                network_interfaces={
                    "network_interface_traffic_mode": HIGH_PERFORMANCE,
                    "network_card_index": secondary[0].network_card_index,
                    "queue_pair_number": secondary[0].queue_pairs,
                    "vswitch_id": args.vswitch_id,
                    "security_group_ids": [args.security_group_id],
                } if secondary else None,
                user_data=user_data,
                key_name=key_pair.key_pair_name if key_pair else None,
                tags={**args.tags, "Name": f"{name}-{i}"},
                volume_tags=args.tags,
                auto_release_time=args.auto_release_time,
                # the release time is set when the node is created: a later up computes a later one, ignored;
                # the boot script reaches a node only when it is rolled, by replacing it
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                    delete_before_replace=True,
                    ignore_changes=([] if i in args.rolled else [USER_DATA_INPUT])
                    + ([AUTO_RELEASE_INPUT] if args.auto_release_time else []),
                    replace_on_changes=[USER_DATA_INPUT] if i in args.rolled else None)),
                **placement,
            )
            alicloud.ecs.RamRoleAttachment(
                f"{name}-{i}-role", instance_id=node.id, ram_role_name=role.role_name, opts=child,
            )
            nodes.append(node)

        self.instance_ids = pulumi.Output.all(*[n.id for n in nodes])
        self.private_ips = pulumi.Output.all(*[n.private_ip for n in nodes])
        self.deployment_set = deployment_set.id if deployment_set else None
        self.boot_scripts = user_data.apply(
            lambda text: {f"{name}-{i}": script_digest(text) for i in range(args.count)})
        self.register_outputs({
            "instance_ids": self.instance_ids, "private_ips": self.private_ips,
            "deployment_set": self.deployment_set, BOOT_SCRIPTS_OUTPUT: self.boot_scripts,
        })

    @staticmethod
    def _role(name: str, args: GpuNodePoolArgs, child: pulumi.ResourceOptions) -> alicloud.ram.Role:
        """Assumed by ECS; reaches the stack's bucket and reads what its shared file system's mount needs, nothing
        else (nodes log in to ACR with a password file the operator provisions: registry-login-acr.sh.j2)."""
        role = alicloud.ram.Role(
            f"{name}-role", role_name=args.role_name,
            assume_role_policy_document=ecs_assume_role(),
            description=f"goldenenv {name} nodes: the stack's bucket", tags=args.tags, opts=child,
        )
        policy = alicloud.ram.Policy(
            f"{name}-access", policy_name=args.role_name,
            policy_document=pulumi.Output.from_input(args.bucket_arn).apply(
                lambda arn: node_policy(arn, args.mount_actions, args.munge_secret)),
            description=f"goldenenv {name} nodes: the stack's bucket only",
            tags=args.tags, opts=child,
        )
        alicloud.ram.RolePolicyAttachment(
            f"{name}-access-attachment", role_name=role.role_name, policy_name=policy.policy_name, policy_type="Custom",
            opts=child,
        )
        return role


def ssh_key_problems(spec: ClusterSpec) -> list[Problem]:
    """A pool key ECS would refuse at `up` (an ED25519 key)."""
    return access.key_type_problems(spec, SSH_KEY_TYPES, "Alibaba ECS (ImportKeyPair takes RSA and ECDSA keys)")


def login_notes(spec: ClusterSpec, user: str) -> list[str]:
    """How a user reaches the nodes, which have no public address: a VPN or jump host, or Cloud Assistant."""
    with_key = ("The nodes have no public address: reach them at their private IPs from network.adminCidrs (a VPN "
                "or a jump host in the VPC; `--ssh-config FILE` with its ProxyJump), as `goldenenv validate|run -s "
                f"{spec.stack}` does by default")
    shell_only = ("Reach them through Cloud Assistant (Workbench in the ECS console, or `aliyun ecs RunCommand`); "
                  "validate and run log in over ssh and need a key: set sshPublicKey to your .pub line (a new key "
                  "restarts running nodes to take it)")
    return access.login_notes(spec, user, with_key, shell_only)


def node_policy(bucket_arn: str, mount_actions: tuple[str, ...] = (), munge_secret: str | None = None) -> str:
    """RAM policy: the stack's bucket and its objects, the read-only calls of the shared file system's mount, and with
    Slurm reading the munge key's secret."""
    return json.dumps({
        "Version": "1",
        "Statement": [
            {"Effect": "Allow", "Action": list(privilege.BUCKET_LIST_ACTIONS), "Resource": [bucket_arn]},
            {"Effect": "Allow", "Action": list(privilege.OBJECT_ACTIONS), "Resource": [f"{bucket_arn}/*"]},
        ] + ([{"Effect": "Allow", "Action": list(mount_actions), "Resource": ["*"]}] if mount_actions else [])
        + ([{"Effect": "Allow", "Action": list(MUNGE_READ_ACTIONS), "Resource": [munge_secret]}] if munge_secret else []),
    })


def auto_release_time(ttl_hours: float, now: datetime) -> str:
    """`now` (aware) + ttl_hours in UTC in Alibaba's format, rounded up to the whole minute (Alibaba drops the
    seconds)."""
    at = (now + timedelta(hours=ttl_hours)).astimezone(timezone.utc)
    if at.second or at.microsecond:
        at = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return at.strftime(AUTO_RELEASE_FORMAT)


def ecs_assume_role() -> str:
    """The trust policy of every goldenenv RAM role: assumed by ECS instances only."""
    return json.dumps({"Version": "1", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                        "Principal": {"Service": [ECS_PRINCIPAL]}}]})


def private_instance(args) -> dict:
    """What every goldenenv ECS instance is, GPU node or Slurm head: pay-as-you-go in the stack's private vSwitch and
    security group, no public bandwidth, an encrypted system disk, hardened-mode metadata (tokens required)."""
    return {
        "instance_type": args.instance_type, "image_id": args.image_id, "availability_zone": args.zone,
        "vswitch_id": args.vswitch_id, "security_groups": [args.security_group_id],
        "resource_group_id": args.resource_group_id, "instance_charge_type": POST_PAID,
        "internet_max_bandwidth_out": 0, "system_disk_category": SYSTEM_DISK, "system_disk_size": args.system_disk_gib,
        "system_disk_encrypted": True, "http_endpoint": "enabled", "http_tokens": HTTP_TOKENS,
    }


def _market(capacity: str) -> dict[str, str]:
    if capacity != "spot":
        return {}
    return {"spot_strategy": SPOT_STRATEGY, "spot_interruption_behavior": SPOT_INTERRUPTION}


def ram_name(*parts: str) -> str:
    """A RAM role or policy name (letters, digits and `-`, at most 64): the parts joined, shortened with a
    hash when too long, so two stacks never share one."""
    text = re.sub(r"[^A-Za-z0-9-]+", "-", "-".join(parts)).strip("-")
    if len(text) <= RAM_NAME_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:RAM_NAME_MAX - 9].rstrip('-')}-{digest}"
