"""What Huawei Cloud's Cloud class and its cluster parts (parts.py) both use: the cloud's name, names Huawei takes
(OBS buckets, IAM agencies and roles, DEW/CSMS secrets, SWR organizations and repositories), a pool's pinned host
image and the stores that outlive a stack. It sits below both, so the parts need not import the package.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from goldenenv.clouds.base import pinned_host_image
from goldenenv.spec import ClusterSpec

CLOUD = "huawei"
NAME_MAX = {"bucket": 63, "iam": 64, "secret": 64, "swr": 64, "ecs": 64, "fgs": 60}
"""An OBS bucket name (3 to 63 characters, DNS rules: pulumi-huaweicloud 0.0.12 obs.Bucket), a DEW/CSMS secret name
(at most 64: dew.Secret), an IAM agency or custom role name (64, unverified), an SWR organization or repository (64,
unverified), an ECS name (64, unverified), a FunctionGraph function name (60, unverified)."""
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
"""Huawei's image IDs (IMS) are UUIDs (ecs.Instance image_id; modelarts CreateDevServer image_id: 'UUID')."""


def short_name(kind: str, *parts: str, lower: bool = False) -> str:
    """Letters, digits and `-` from parts, at most NAME_MAX[kind], shortened with a hash so two stacks never share."""
    text = re.sub(r"[^A-Za-z0-9]+", "-", "-".join(parts)).strip("-")
    text = text.lower() if lower else text
    limit = NAME_MAX[kind]
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:limit - 9].rstrip('-')}-{digest}"


def bucket_name(project: str, stack: str) -> str:
    """The stack's OBS bucket: lower-case letters, digits and `-` (OBS names are global: the stack's own)."""
    return short_name("bucket", "goldenenv", project, stack, "data", lower=True)


def iam_name(project: str, stack: str, what: str) -> str:
    return short_name("iam", "goldenenv", project, stack, what)


def secret_name(project: str, stack: str) -> str:
    return short_name("secret", "goldenenv", project, stack, "munge")


def registry_names(project: str, stack: str) -> tuple[str, str]:
    """(SWR organization, repository): the organization is global across Huawei's accounts, so it carries the
    project and the stack; the repository is the golden image."""
    return short_name("swr", "ge", project, stack, lower=True), "golden"


def image_args(image: str) -> dict[str, str]:
    """The provider's argument for a pinned host image: image_id for an image UUID, image_name for a public image
    the catalog knows only by its published name (host_images.csv)."""
    return {"image_id": image} if UUID.fullmatch(image) else {"image_name": image}


def host_image(spec: ClusterSpec, pool: Any, baked_for: Any = None) -> str:
    """The pool's pinned image: the one baked for its host layer (baked_for), else the stack's own id, else the
    catalog's."""
    return pinned_host_image(CLOUD, spec, pool, baked_for)
