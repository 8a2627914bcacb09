"""The Slurm head's processor architecture on Huawei Cloud.

The head runs slurmctld in the stack's golden image, so its flavor must be of the image's platform: an Ascend lock is
linux/arm64 (accelerators/ascend), and an x86 head cannot run it. The head's flavor says its architecture (catalog
head_types.csv: c6.large.2 is x86_64, the Kunpeng kc1.large.2 aarch64); an arm64 head boots the catalog's public arm64
ECS image, since the first pool's image (the head's on every other stack) is an x86 one or, on a Lite Server pool, a
bare-metal Snt9B image that no ECS flavor boots.
"""

from __future__ import annotations

from typing import Any

from goldenenv import accelerators, catalog
from goldenenv.clouds.base import head_shape, pinned_host_image
from goldenenv.clouds.huawei.basics import CLOUD
from goldenenv.spec import ClusterSpec, Problem

ARCH = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
"""The machine architecture (head_types.csv's arch) that runs an image of each OCI platform."""
ECS_IMAGE = {"aarch64": "ubuntu-2204-arm"}
"""The catalog host image an ECS head of an architecture other than x86_64 boots (host_images.csv)."""


def image_arch(spec: ClusterSpec) -> str:
    """The architecture the stack's golden image is built for: its accelerator family's platform, else x86_64."""
    from goldenenv.images.lock import load

    lock = load(spec.image.lock)
    family = accelerators.of_lock(lock)
    return ARCH[family.platform(lock) if family else "linux/amd64"]


def head_arch(spec: ClusterSpec, cloud: Any) -> str | None:
    """The architecture of the stack's head flavor, or None: no head, or a flavor the catalog does not list."""
    shape = head_shape(spec, cloud)
    head = catalog.head_type(CLOUD, shape.instance_type) if shape else None
    return head.arch if head else None


def problems(spec: ClusterSpec, cloud: Any) -> list[Problem]:
    """A head whose flavor cannot run the golden image, with the head flavors that can."""
    arch = head_arch(spec, cloud)
    wanted = image_arch(spec)
    if arch is None or arch == wanted:
        return []
    shape = head_shape(spec, cloud)
    valid = sorted(r["instance_type"] for r in catalog.rows("head_types")
                   if r["cloud"] == CLOUD and r["arch"] == wanted)
    return [Problem("goldenenv:head.instanceType",
                    f"{shape.instance_type} is an {arch} flavor and lock {spec.image.lock} is built for {wanted}: "
                    f"the head runs slurmctld in the golden image; valid: {', '.join(valid) or 'none in the catalog'}")]


def head_image(spec: ClusterSpec, cloud: Any, baked_for: Any) -> str:
    """The image the head boots: the first pool's (baked for the head's host layer when one is recorded) on an x86
    head, else the catalog's ECS image of the head's architecture."""
    name = ECS_IMAGE.get(head_arch(spec, cloud) or "x86_64")
    if name is None:
        return pinned_host_image(CLOUD, spec, spec.nodes[0], baked_for)
    image = catalog.host_image(CLOUD, spec.region, name)
    if image is None:
        raise ValueError(f"the catalog has no host image {name} for {spec.region}")
    return image.image_id
