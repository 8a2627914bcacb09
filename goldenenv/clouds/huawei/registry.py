"""The stack's image registry on Huawei Cloud: an SWR organization (private) and the golden image's repository. Hosts
log in with a temporary login from their agency (templates/node/registry-login-swr.sh.j2); `image push` logs in with
one from the caller's credentials (SWR CreateSecret: https://support.huaweicloud.com/api-swr/swr_02_0052.html), and
nodes pull the image by digest.

The registry host swr.<region>.myhuaweicloud.com and the API host swr-api.<region>.myhuaweicloud.com are the forms
Huawei's SWR guides use (unverified: read in no page here).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_huaweicloud as huaweicloud


def registry_host(region: str) -> str:
    return f"swr.{region}.myhuaweicloud.com"


def api_host(region: str) -> str:
    return f"swr-api.{region}.myhuaweicloud.com"


def repository_url(region: str, organization: str, repository: str) -> str:
    return f"{registry_host(region)}/{organization}/{repository}"


@dataclass(frozen=True, kw_only=True)
class ImageRepositoryArgs:
    region: str
    organization: str
    repository: str


class ImageRepository(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(self, name: str, args: ImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:ImageRepository", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        organization = huaweicloud.swr.Organization(f"{name}-organization", name=args.organization, opts=child)
        huaweicloud.swr.Repository(f"{name}-repository", organization=organization.name, name=args.repository,
                                   is_public=False, category="linux", description="goldenenv golden image",
                                   opts=child)
        self.url = pulumi.Output.from_input(repository_url(args.region, args.organization, args.repository))
        self.register_outputs({"url": self.url})
