"""What Tencent Cloud's Cloud class and its cluster parts (parts.py) both use: the cloud's name, HCC types and their
HPC cluster, names Tencent takes (COS buckets, CAM roles, SSM secrets, TCR), a pool's pinned host image and the
stores that outlive a stack. It sits below both, so the parts need not import the package.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.base import pinned_host_image
from goldenenv.spec import ClusterSpec

CLOUD = "tencent"
HCC_PREFIX = "HCC"
"""Tencent's high-performance computing cluster families (HCCPNV4sn, HCCPNV4ane, HCCPNV5 ...): the only types an HPC
cluster takes, and the only ones that must join one (InvalidParameterValue.InstanceTypeNotSupportHpcCluster and
InstanceTypeRequiredHpcCluster: tencentcloud-sdk-python-cvm 3.1.178 errorcodes.py)."""
FABRIC = "hcc"
SITE_CHINA, SITE_INTERNATIONAL = "china", "international"
INTERNATIONAL_API = "intl.tencentcloudapi.com"
"""The international site's API hosts are *.intl.tencentcloudapi.com (Tencent's API docs, e.g.
https://tencentcloud.com/document/product/213/33270); the provider's `domain` defaults to tencentcloudapi.com."""
NAME_MAX = {"cam": 128, "ssm": 128, "bucket": 50, "tcr": 30, "key": 25}
"""CAM role and policy names (<= 128), SSM secret names (<= 128: tencentcloud-iac-pulumi 0.2.3 ssm.Secret), the part
of a COS bucket name before -<appid> (unverified: no COS naming page read), a TCR instance name (unverified), a key
pair name (<= 25 letters, digits and _: tencentcloud-sdk-python-cvm 3.1.178 CreateKeyPairRequest/ImportKeyPairRequest
KeyName)."""
SEPARATOR = {"key": "_"}
"""A key pair name takes no `-` (KeyName above); every other name here takes `-`."""


def is_hcc(instance_type: str) -> bool:
    return instance_type.upper().startswith(HCC_PREFIX)


def hcc_pool(pool: Any, it: catalog.InstanceType) -> bool:
    """Whether the pool's nodes join the stack's HPC cluster: an HCC type, unless the pool turns RDMA off (then the
    type is refused: an HCC instance must join one)."""
    return is_hcc(it.name) and it.rdma == FABRIC


def short_name(kind: str, *parts: str, lower: bool = False) -> str:
    """letters, digits and the kind's separator (`-`; `_` for a key pair) from parts, at most NAME_MAX[kind],
    shortened with a hash so two stacks never share."""
    sep = SEPARATOR.get(kind, "-")
    text = re.sub(r"[^A-Za-z0-9]+", sep, sep.join(parts)).strip(sep)
    text = text.lower() if lower else text
    limit = NAME_MAX[kind]
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:limit - 9].rstrip(sep)}{sep}{digest}"


def bucket_name(project: str, stack: str) -> str:
    """The stack's COS bucket name before Tencent's -<appid> suffix: lower-case letters, digits and `-`."""
    return short_name("bucket", "goldenenv", project, stack, "data", lower=True)


def role_name(project: str, stack: str, what: str) -> str:
    return short_name("cam", "goldenenv", project, stack, what)


def secret_name(project: str, stack: str) -> str:
    return short_name("ssm", "goldenenv", project, stack, "munge")


def registry_names(project: str, stack: str) -> tuple[str, str, str]:
    """(TCR instance, namespace, repository): one instance per stack (a TCR instance is billed per instance), the
    project's namespace, the stack's repository."""
    return (short_name("tcr", "ge", project, stack, lower=True), short_name("tcr", project, lower=True),
            short_name("tcr", stack, "golden", lower=True))


def host_image_id(spec: ClusterSpec, pool: Any, baked_for: Any = None) -> str:
    """The pool's pinned image: the one baked for its host layer (baked_for), else the stack's own id, else the
    catalog's (public image IDs are the same in every region)."""
    return pinned_host_image(CLOUD, spec, pool, baked_for)
