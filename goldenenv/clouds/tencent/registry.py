"""The stack's image registry on Tencent Cloud: a TCR instance (basic edition), the project's namespace (private), the
stack's repository, and the instance's VPC access with its private DNS, so the nodes pull over the VPC. Nodes log in
with a one-hour token from their CAM role (templates/node/registry-login-tcr.sh.j2); `image push` logs in with a
token from the caller's credentials.

The registry's host name <instance>.tencentcloudcr.com is the form TCR gives (unverified: read on no Tencent page
here); with enable_vpc_domain_dns the same name resolves to the VPC endpoint inside the VPC
(https://cloud.tencent.com/document/api/1141/53131).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

TCR_EDITION = "basic"
"""tcr.Instance instance_type: basic, standard or premium (tencentcloud-iac-pulumi 0.2.3)."""
TCR_VERSION = "2019-09-24"


def registry_host(instance: str) -> str:
    return f"{instance}.tencentcloudcr.com"


def repository_url(instance: str, namespace: str, repository: str) -> str:
    return f"{registry_host(instance)}/{namespace}/{repository}"


@dataclass(frozen=True, kw_only=True)
class ImageRepositoryArgs:
    instance: str
    namespace: str
    repository: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    tags: dict[str, str]


class ImageRepository(pulumi.ComponentResource):
    url: pulumi.Output[str]
    registry_id: pulumi.Output[str]
    """The TCR instance's id (tcr-...): the hosts' pull grant names the repository under it."""

    def __init__(self, name: str, args: ImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:ImageRepository", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        registry = tencentcloud.tcr.Instance(f"{name}-tcr", name=args.instance, instance_type=TCR_EDITION,
                                             open_public_operation=True, delete_bucket=True, tags=args.tags,
                                             opts=child)
        namespace = tencentcloud.tcr.Namespace(f"{name}-namespace", instance_id=registry.id, name=args.namespace,
                                               is_public=False, opts=child)
        tencentcloud.tcr.Repository(f"{name}-repository", instance_id=registry.id,
                                    namespace_name=namespace.name, name=args.repository,
                                    brief_desc="goldenenv golden image", opts=child)
        tencentcloud.tcr.VpcAttachment(f"{name}-vpc", instance_id=registry.id, vpc_id=args.vpc_id,
                                       subnet_id=args.subnet_id, enable_vpc_domain_dns=True, opts=child)
        self.url = pulumi.Output.from_input(repository_url(args.instance, args.namespace, args.repository))
        self.registry_id = registry.id
        self.register_outputs({"url": self.url, "registryId": self.registry_id})
